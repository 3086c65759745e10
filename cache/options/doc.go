// Package options holds the command-line options of a cache server. The
// Options struct composes upstream option structs (secure serving, etcd) with
// the embedded etcd's own; a host process can embed it next to its options.
// Flags go into component-base named flag sets; nothing registers globally.
//
// Use: NewOptions → AddFlags → Complete → Validate, then hand the completed
// options to cache/server.NewConfig.
package options
