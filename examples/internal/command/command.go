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
	logOptions := logs.NewOptions()
	var fss cliflag.NamedFlagSets
	addFlags(&fss)
	logsapi.AddFlags(logOptions, fss.FlagSet("Logging"))
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
