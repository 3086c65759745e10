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
		rows := flagRows(fss.FlagSets[name])
		if len(rows) == 0 {
			continue
		}
		if _, err := fmt.Fprintf(w, "\n## %s\n\n%s", name, table(rows)); err != nil {
			return err
		}
	}
	return nil
}

// WriteSubcommandMarkdown writes a subcommand's flags as one Markdown
// section: a heading naming the command line, its summary, and one table
// of the flags of every flag set but the "Logging" one New adds to every
// command (the parent's section shows it).
func WriteSubcommandMarkdown(w io.Writer, commandLine, summary string, fss cliflag.NamedFlagSets) error {
	var rows []string
	for _, name := range fss.Order {
		if name != loggingSection {
			rows = append(rows, flagRows(fss.FlagSets[name])...)
		}
	}
	_, err := fmt.Fprintf(w, "\n## `%s`\n\n%s\n\n%s", commandLine, summary, table(rows))
	return err
}

// flagRows are the table rows of the flags --help shows (hidden and
// deprecated flags are left out, as --help leaves them out).
func flagRows(fs *pflag.FlagSet) []string {
	var rows []string
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Hidden || f.Deprecated != "" {
			return
		}
		rows = append(rows, fmt.Sprintf("| %s | %s | %s |", flagName(f), flagDefault(f), cell(f.Usage)))
	})
	return rows
}

func table(rows []string) string {
	return "| flag | default | meaning |\n| --- | --- | --- |\n" + strings.Join(rows, "\n") + "\n"
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
