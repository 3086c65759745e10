package command

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/pflag"
	cliflag "k8s.io/component-base/cli/flag"
)

// WriteMarkdown writes fss as Markdown: one section per flag set, in
// --help's order, and in it one table row per flag --help shows (hidden and
// deprecated flags are left out, as --help leaves them out), with its type,
// default and help text exactly as the binary has them.
func WriteMarkdown(w io.Writer, fss cliflag.NamedFlagSets) error {
	for _, name := range fss.Order {
		fs := fss.FlagSets[name]
		var rows []string
		fs.VisitAll(func(f *pflag.Flag) {
			if f.Hidden || f.Deprecated != "" {
				return
			}
			rows = append(rows, fmt.Sprintf("| %s | %s | %s |", flagName(f), flagDefault(f), cell(f.Usage)))
		})
		if len(rows) == 0 {
			continue
		}
		if _, err := fmt.Fprintf(w, "\n## %s\n\n| flag | default | meaning |\n| --- | --- | --- |\n%s\n", name, strings.Join(rows, "\n")); err != nil {
			return err
		}
	}
	return nil
}

func flagName(f *pflag.Flag) string {
	name := "`--" + f.Name
	if f.Shorthand != "" {
		name = "`-" + f.Shorthand + "`, " + name
	}
	if t := f.Value.Type(); t != "bool" {
		name += " " + t
	}
	return name + "`"
}

// flagDefault is the default as --help prints it, and nothing for the zero
// values --help omits too.
func flagDefault(f *pflag.Flag) string {
	switch f.DefValue {
	case "", "[]", "0", "0s", "false", "<nil>", "map[]":
		return ""
	}
	return "`" + strings.ReplaceAll(f.DefValue, "`", "'") + "`"
}

// cell makes s one Markdown table cell: one line, pipes escaped.
func cell(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	return strings.ReplaceAll(s, "|", `\|`)
}
