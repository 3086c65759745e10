// Command housefigures prints the figures of the house (issue 43) that a
// reviewer can recompute from the code: in cache/server's root, the
// references that run against the layering and the files a reader visits
// following the options from NewConfig; server.go's length; the types for
// a peer, the types that hold one and the clients built for one; and every
// file's line count in cache/server's root, mirror and homes.
//
//	go run ./hack/ci/housefigures
//
// The layering of cache/server's root, from the bottom: the helpers that
// the translators and New use (0), the configuration's types (1), the
// translators of options into it (2), the pieces New assembles (3), the
// lifecycle (4), serving in a host (5). A
// back-arrow is a file that refers to a top-level name (a function, type,
// variable, constant, or a method called through a selector) declared in
// a file of a higher rank; a method's own receiver type does not count.
// Each (file, name) pair counts once. Test files are left out; the
// package is type-checked as the default build (without -tags kcp).
//
// The reader's walk starts at NewConfig and follows, depth first and in
// source order, every call of a function or method of the root package
// that it has not visited yet; a room is a run of consecutive functions in
// one file, a climb back a room in a file the walk had already been in.
package main

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

const root = "cache/server"

// rank is the layering of cache/server's root files; a file not named here
// is reported and ranked 3.
var rank = map[string]int{
	"auth.go": 0, "etcd.go": 0, "kubeconfig.go": 0,
	"apiextensions_kcp.go": 0, "apiextensions_upstream.go": 0, "crdlister_kcp.go": 0,
	"config.go": 1,
	"apply.go":  2,
	"loops.go":  3, "plane.go": 3, "handler.go": 3, "hierarchy.go": 3, "backup.go": 3, "kcplayout.go": 3,
	"server.go": 4,
	"mount.go":  5,
}

type decl struct {
	file string
	fn   *ast.FuncDecl
}

func main() {
	fset := token.NewFileSet()
	files := map[string]*ast.File{}
	var names []string
	var parsed []*ast.File
	entries, err := os.ReadDir(root)
	check(err)
	for _, e := range entries {
		n := e.Name()
		// The default build (no kcp tag): what the type checker reads.
		if e.IsDir() || !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") || strings.HasSuffix(n, "_kcp.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(root, n), nil, 0)
		check(err)
		files[n] = f
		names = append(names, n)
		parsed = append(parsed, f)
	}
	sort.Strings(names)

	// Exact references: the package type-checked against the export data
	// of its dependencies (go list -export).
	out, err := exec.Command("go", "list", "-export", "-f", "{{.ImportPath}} {{.Export}}", "-deps", "./"+root).Output()
	check(err)
	exports := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if path, file, ok := strings.Cut(l, " "); ok && file != "" {
			exports[path] = file
		}
	}
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		if f, ok := exports[path]; ok {
			return os.Open(f)
		}
		return nil, fmt.Errorf("no export data for %s", path)
	})
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}}
	pkg, err := (&types.Config{Importer: imp}).Check("server", fset, parsed, info)
	check(err)
	fileOf := func(obj types.Object) string {
		if obj == nil || obj.Pkg() != pkg {
			return ""
		}
		if fn, ok := obj.(*types.Func); ok && fn.Signature().Recv() != nil {
			// A method of a type of the package.
		} else if obj.Parent() != pkg.Scope() {
			return ""
		}
		return filepath.Base(fset.Position(obj.Pos()).Filename)
	}

	// Functions and methods by their object.
	funcs := map[types.Object]decl{}
	defs := map[*ast.FuncDecl]types.Object{}
	for _, n := range names {
		for _, d := range files[n].Decls {
			if fd, ok := d.(*ast.FuncDecl); ok {
				obj := pkg.Scope().Lookup(fd.Name.Name)
				if fd.Recv != nil {
					obj = nil
					tn, _ := pkg.Scope().Lookup(recvName(fd.Recv.List[0].Type)).(*types.TypeName)
					if tn != nil {
						obj, _, _ = types.LookupFieldOrMethod(tn.Type(), true, pkg, fd.Name.Name)
					}
				}
				if obj != nil {
					funcs[obj] = decl{n, fd}
					defs[fd] = obj
				}
			}
		}
	}

	// Back-arrows.
	var arrows []string
	for _, n := range names {
		r, ok := rank[n]
		if !ok {
			if n != "doc.go" {
				fmt.Printf("unranked file %s (ranked 3)\n", n)
			}
			r = 3
		}
		seen := map[string]bool{}
		for _, d := range files[n].Decls {
			receiver := ""
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv != nil {
				receiver = recvName(fd.Recv.List[0].Type)
			}
			ast.Inspect(d, func(x ast.Node) bool {
				id, ok := x.(*ast.Ident)
				if !ok {
					return true
				}
				obj := info.Uses[id]
				in := fileOf(obj)
				if in == "" || in == n || id.Name == receiver || seen[id.Name] {
					return true
				}
				tr, ok := rank[in]
				if !ok {
					tr = 3
				}
				if tr > r {
					seen[id.Name] = true
					arrows = append(arrows, fmt.Sprintf("%s -> %s (%s)", n, id.Name, in))
				}
				return true
			})
		}
	}
	fmt.Printf("back-arrows in %s's root: %d\n", root, len(arrows))
	for _, a := range arrows {
		fmt.Println("  " + a)
	}

	// The reader's walk from NewConfig.
	visited := map[types.Object]bool{}
	var walk []string
	var visit func(obj types.Object)
	visit = func(obj types.Object) {
		d, ok := funcs[obj]
		if !ok || visited[obj] {
			return
		}
		visited[obj] = true
		walk = append(walk, d.file)
		ast.Inspect(d.fn.Body, func(x ast.Node) bool {
			if call, ok := x.(*ast.CallExpr); ok {
				switch f := call.Fun.(type) {
				case *ast.Ident:
					visit(info.Uses[f])
				case *ast.SelectorExpr:
					visit(info.Uses[f.Sel])
				}
			}
			return true
		})
		walk = append(walk, d.file) // back in the caller's file
	}
	visit(pkg.Scope().Lookup("NewConfig"))
	var rooms []string
	for _, f := range walk {
		if len(rooms) == 0 || rooms[len(rooms)-1] != f {
			rooms = append(rooms, f)
		}
	}
	distinct := map[string]bool{}
	climbs := 0
	for i, f := range rooms {
		if distinct[f] && i > 0 {
			climbs++
		}
		distinct[f] = true
	}
	fmt.Printf("reader's walk from NewConfig: %d rooms, %d files, %d climbs back\n  %s\n", len(rooms), len(distinct), climbs, strings.Join(rooms, " -> "))

	// server.go's length, the peer types, every file's length.
	fmt.Printf("server.go: %d lines\n", lines(filepath.Join(root, "server.go")))
	// A peer of the hierarchy: the types named for it in the mirror and
	// the claims table, the types that hold one (a field or an embedded
	// Peer: state kept per peer, not a second description of it), and the
	// clients built for it: an HTTP client of its own (HTTPClientFor, and
	// the constructors that build one inside), or a client on one already
	// built (NewForConfigAndClient).
	peerType := regexp.MustCompile(`^type ([A-Za-z]*[Pp]eer[A-Za-z]*) `)
	clientCall := regexp.MustCompile(`HTTPClientFor\(|NewForConfig\(|RESTClientFor\(`)
	onClientCall := regexp.MustCompile(`NewForConfigAndClient\(`)
	var peers, holders, clients, onClients []string
	for _, dir := range []string{root + "/mirror", root + "/homes"} {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
				continue
			}
			p := filepath.Join(dir, e.Name())
			f, err := os.Open(p)
			check(err)
			sc := bufio.NewScanner(f)
			for i := 1; sc.Scan(); i++ {
				if m := peerType.FindStringSubmatch(sc.Text()); m != nil {
					peers = append(peers, p+": "+m[1])
				}
				if clientCall.MatchString(sc.Text()) {
					clients = append(clients, fmt.Sprintf("%s:%d: %s", p, i, strings.TrimSpace(sc.Text())))
				}
				if onClientCall.MatchString(sc.Text()) {
					onClients = append(onClients, fmt.Sprintf("%s:%d: %s", p, i, strings.TrimSpace(sc.Text())))
				}
			}
			f.Close()
			holders = append(holders, peerHolders(fset, p)...)
		}
	}
	fmt.Printf("types for a peer (type *peer* in mirror and homes): %d\n", len(peers))
	for _, p := range peers {
		fmt.Println("  " + p)
	}
	fmt.Printf("types that hold a peer (a Peer field, or one embedded): %d\n", len(holders))
	for _, h := range holders {
		fmt.Println("  " + h)
	}
	fmt.Printf("HTTP clients built in mirror and homes (per peer, and the local one): %d\n", len(clients))
	for _, c := range clients {
		fmt.Println("  " + c)
	}
	fmt.Printf("clients on an HTTP client already built: %d\n", len(onClients))
	for _, c := range onClients {
		fmt.Println("  " + c)
	}
	for _, dir := range []string{root, root + "/mirror", root + "/homes"} {
		ents, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		total, n := 0, 0
		fmt.Printf("%s:\n", dir)
		for _, e := range ents {
			if e.IsDir() || !strings.HasSuffix(e.Name(), ".go") {
				continue
			}
			l := lines(filepath.Join(dir, e.Name()))
			total += l
			n++
			fmt.Printf("  %5d %s\n", l, e.Name())
		}
		fmt.Printf("  %5d total (%d files)\n", total, n)
	}
}

// peerHolders returns the struct types of file p with a field of type
// Peer (of the package or package homes), by pointer or not, embedded or
// named.
func peerHolders(fset *token.FileSet, p string) []string {
	f, err := parser.ParseFile(fset, p, nil, 0)
	check(err)
	var out []string
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.TYPE {
			continue
		}
		for _, spec := range g.Specs {
			ts := spec.(*ast.TypeSpec)
			st, ok := ts.Type.(*ast.StructType)
			if !ok {
				continue
			}
			for _, field := range st.Fields.List {
				t := field.Type
				if star, ok := t.(*ast.StarExpr); ok {
					t = star.X
				}
				name := ""
				switch t := t.(type) {
				case *ast.Ident:
					name = t.Name
				case *ast.SelectorExpr:
					name = t.Sel.Name
				}
				if name == "Peer" {
					out = append(out, p+": "+ts.Name.Name)
					break
				}
			}
		}
	}
	return out
}

func recvName(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.StarExpr:
		return recvName(e.X)
	case *ast.Ident:
		return e.Name
	case *ast.IndexExpr:
		return recvName(e.X)
	}
	return ""
}

func lines(p string) int {
	b, err := os.ReadFile(p)
	check(err)
	return strings.Count(string(b), "\n")
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
