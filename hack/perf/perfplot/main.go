// Command perfplot draws the scale phase's costs per object as curves: it
// reads the JSON reports of `go run ./examples/bench -phases scale
// -json-file F` (several files are merged, later files' rows replacing
// earlier ones) and writes a PNG with two panels, objects on a logarithmic
// x axis: heap and RSS per object, and the time from a restart to ready;
// ours as solid lines, kcp's cache-server dashed. hack/perf/scale.sh runs the
// bench and then this.
//
//	cd hack/perf/perfplot && go run . -out ../../../docs/scale.png /tmp/kcp-cache-scale/scale.json
//
// It is a module of its own so that its drawing dependency
// (golang.org/x/image, for the labels' font) stays out of the library's
// module graph, which kcp takes.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// row is what perfplot reads of the bench's rows.
type row struct {
	ID            string  `json:"id"`
	Baseline      string  `json:"baseline"`
	Cache         string  `json:"cache"`
	CacheValue    float64 `json:"cache_value"`
	BaselineValue float64 `json:"baseline_value"`
}

// series is one curve: its label, style and points (objects -> value).
type series struct {
	label  string
	color  color.RGBA
	dashed bool
	points map[int]float64
}

func main() {
	out := flag.String("out", "scale.png", "the PNG to write")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: perfplot -out F.png REPORT.json...")
		os.Exit(2)
	}
	rows := map[string]row{}
	for _, path := range flag.Args() {
		if err := readRows(path, rows); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	blue, orange := color.RGBA{31, 119, 180, 255}, color.RGBA{255, 127, 14, 255}
	green, red := color.RGBA{44, 160, 44, 255}, color.RGBA{214, 39, 40, 255}
	perObject := []*series{
		pick(rows, "d", "heap/object, ours", blue, false, false),
		pick(rows, "e", "RSS/object, ours", orange, false, false),
		pick(rows, "d", "heap/object, kcp's", blue, true, true),
		pick(rows, "e", "RSS/object, kcp's", orange, true, true),
	}
	restart := []*series{
		pick(rows, "b", "restart to ready, ours", green, false, false),
		pick(rows, "b", "restart to ready, kcp's", red, true, true),
	}
	img := image.NewRGBA(image.Rect(0, 0, 960, 380))
	draw.Draw(img, img.Bounds(), image.White, image.Point{}, draw.Src)
	panel(img, image.Rect(0, 0, 480, 380), "bytes per object at rest", "KB", 1.0/1024, perObject)
	panel(img, image.Rect(480, 0, 960, 380), "restart (SIGKILL) to /readyz 200", "s", 1, restart)
	f, err := os.Create(*out)
	if err == nil {
		err = png.Encode(f, img)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func readRows(path string, into map[string]row) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var rep struct {
		Rows []row `json:"rows"`
	}
	if err := json.Unmarshal(data, &rep); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	for _, r := range rep.Rows {
		into[r.ID] = r
	}
	return nil
}

// pick gathers the scale rows "11<letter>-<objects>" as one series, of the
// baseline (kcp's) or of ours; a server that did not measure a size has no
// point there.
func pick(rows map[string]row, letter, label string, c color.RGBA, dashed, baseline bool) *series {
	s := &series{label: label, color: c, dashed: dashed, points: map[int]float64{}}
	for id, r := range rows {
		rest, ok := strings.CutPrefix(id, "11"+letter+"-")
		if !ok {
			continue
		}
		n, err := strconv.Atoi(rest)
		if err != nil {
			continue
		}
		// A figure starts with a digit; a row a server did not measure
		// says why instead ("not run", "killed (6Gi memory limit)").
		switch {
		case baseline && startsWithDigit(strings.TrimPrefix(r.Baseline, "kcp's cache-server: ")) && strings.HasPrefix(r.Baseline, "kcp's cache-server: "):
			s.points[n] = r.BaselineValue
		case !baseline && startsWithDigit(r.Cache):
			s.points[n] = r.CacheValue
		}
	}
	return s
}

func startsWithDigit(s string) bool { return s != "" && s[0] >= '0' && s[0] <= '9' }

// panel draws series in r: a title, axes with ticks at every size and at
// round values, the curves, and a legend. scale converts values to the
// unit shown.
func panel(img *image.RGBA, r image.Rectangle, title, unit string, scale float64, all []*series) {
	plot := image.Rect(r.Min.X+60, r.Min.Y+40, r.Max.X-20, r.Max.Y-100)
	var sizes []int
	seen := map[int]bool{}
	maxV := 0.0
	for _, s := range all {
		for n, v := range s.points {
			if !seen[n] {
				seen[n] = true
				sizes = append(sizes, n)
			}
			maxV = math.Max(maxV, v*scale)
		}
	}
	sort.Ints(sizes)
	text(img, r.Min.X+60, r.Min.Y+20, title+" ("+unit+")", color.Black)
	grey := color.RGBA{160, 160, 160, 255}
	line(img, plot.Min.X, plot.Max.Y, plot.Max.X, plot.Max.Y, color.Black, false)
	line(img, plot.Min.X, plot.Min.Y, plot.Min.X, plot.Max.Y, color.Black, false)
	if len(sizes) == 0 || maxV == 0 {
		text(img, plot.Min.X+10, plot.Min.Y+20, "no data", color.Black)
		return
	}
	top := niceCeil(maxV)
	x := func(n int) int {
		lo, hi := math.Log10(float64(sizes[0])), math.Log10(float64(sizes[len(sizes)-1]))
		if hi == lo {
			return (plot.Min.X + plot.Max.X) / 2
		}
		return plot.Min.X + 20 + int((math.Log10(float64(n))-lo)/(hi-lo)*float64(plot.Dx()-40))
	}
	y := func(v float64) int { return plot.Max.Y - int(v*scale/top*float64(plot.Dy())) }
	for i := 0; i <= 4; i++ {
		v := top * float64(i) / 4
		yy := plot.Max.Y - int(float64(i)/4*float64(plot.Dy()))
		line(img, plot.Min.X-4, yy, plot.Max.X, yy, grey, true)
		text(img, r.Min.X+8, yy+4, strconv.FormatFloat(v, 'g', 3, 64), color.Black)
	}
	for _, n := range sizes {
		xx := x(n)
		line(img, xx, plot.Max.Y, xx, plot.Max.Y+4, color.Black, false)
		text(img, xx-20, plot.Max.Y+18, strconv.Itoa(n), color.Black)
	}
	text(img, plot.Min.X+plot.Dx()/2-20, plot.Max.Y+34, "objects", color.Black)
	for i, s := range all {
		var prev *image.Point
		for _, n := range sizes {
			v, ok := s.points[n]
			if !ok {
				prev = nil
				continue
			}
			p := image.Pt(x(n), y(v))
			dot(img, p, s.color)
			if prev != nil {
				line(img, prev.X, prev.Y, p.X, p.Y, s.color, s.dashed)
			}
			prev = &p
		}
		ly := plot.Max.Y + 52 + 14*(i/2)
		lx := r.Min.X + 20 + 230*(i%2)
		line(img, lx, ly-4, lx+24, ly-4, s.color, s.dashed)
		label := s.label
		if len(s.points) == 0 {
			label += " (not measured)"
		}
		text(img, lx+30, ly, label, color.Black)
	}
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func text(img *image.RGBA, x, y int, s string, c color.Color) {
	d := font.Drawer{Dst: img, Src: image.NewUniform(c), Face: basicfont.Face7x13, Dot: fixed.P(x, y)}
	d.DrawString(s)
}

// line draws from (x0,y0) to (x1,y1), two pixels wide, dashed if asked.
func line(img *image.RGBA, x0, y0, x1, y1 int, c color.Color, dashed bool) {
	steps := max(abs(x1-x0), abs(y1-y0), 1)
	for i := 0; i <= steps; i++ {
		if dashed && (i/6)%2 == 1 {
			continue
		}
		xx := x0 + (x1-x0)*i/steps
		yy := y0 + (y1-y0)*i/steps
		img.Set(xx, yy, c)
		img.Set(xx, yy+1, c)
	}
}

func dot(img *image.RGBA, p image.Point, c color.Color) {
	for dx := -3; dx <= 3; dx++ {
		for dy := -3; dy <= 3; dy++ {
			if dx*dx+dy*dy <= 9 {
				img.Set(p.X+dx, p.Y+dy, c)
			}
		}
	}
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}
