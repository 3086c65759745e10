// Package command holds the wiring the example binaries share: flags in
// named sections plus component-base logging, usage printed by section, and
// a signal-aware context for the command's body.
package command

import (
	"context"

	"github.com/spf13/cobra"
	genericapiserver "k8s.io/apiserver/pkg/server"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/component-base/logs"
	logsapi "k8s.io/component-base/logs/api/v1"
)

// New completes cmd: addFlags fills the named flag sets, a "Logging" section
// is added, and run is called with a context that ends on SIGINT or SIGTERM,
// after the logging flags have been applied.
func New(cmd *cobra.Command, addFlags func(*cliflag.NamedFlagSets), run func(ctx context.Context) error) *cobra.Command {
	fss, logOptions := flagSets(addFlags)
	for _, f := range fss.FlagSets {
		cmd.Flags().AddFlagSet(f)
	}
	cliflag.SetUsageAndHelpFunc(cmd, fss, 0)
	cmd.SilenceUsage = true
	cmd.RunE = func(*cobra.Command, []string) error {
		if err := logsapi.ValidateAndApply(logOptions, nil); err != nil {
			return err
		}
		return run(genericapiserver.SetupSignalContext())
	}
	return cmd
}

// FlagSets returns the named flag sets New gives a command built with
// addFlags, in the order --help prints them: what the documentation of the
// command's flags is generated from.
func FlagSets(addFlags func(*cliflag.NamedFlagSets)) cliflag.NamedFlagSets {
	fss, _ := flagSets(addFlags)
	return fss
}

// loggingSection names the flag set of the logging flags New adds.
const loggingSection = "Logging"

func flagSets(addFlags func(*cliflag.NamedFlagSets)) (cliflag.NamedFlagSets, *logs.Options) {
	logOptions := logs.NewOptions()
	var fss cliflag.NamedFlagSets
	addFlags(&fss)
	logsapi.AddFlags(logOptions, fss.FlagSet(loggingSection))
	return fss, logOptions
}
