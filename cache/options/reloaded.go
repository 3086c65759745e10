package options

import "github.com/spf13/pflag"

// reloadedServingFiles complete the help of upstream's serving flags whose
// files upstream's serving reads again when they change (its
// dynamiccertificates controllers, started by SecureServingInfo.Serve):
// upstream's help does not say so.
var reloadedServingFiles = map[string]string{
	"tls-cert-file":        "Read again when it changes, with --tls-private-key-file: new connections get the new certificate, without a restart.",
	"tls-private-key-file": "Read again when it changes.",
	"cert-dir":             "Here it defaults to --root-directory; the self-signed certificate's files in it (apiserver.crt, apiserver.key) are read again when they change.",
	"tls-sni-cert-key":     "The files are read again when they change.",
}

// markReloadedFlags appends to the help of fs's serving flags that their
// files are read again when they change.
func markReloadedFlags(fs *pflag.FlagSet) {
	for name, note := range reloadedServingFiles {
		if f := fs.Lookup(name); f != nil {
			f.Usage += " " + note
		}
	}
}
