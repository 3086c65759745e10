// Package authentication holds the identities a cache server knows: the
// tokens it issues itself (the admin's, kept under the root directory, and
// a mounted cache's host shard's), the operator's client certificates and
// token file, and anonymous access to the paths anyone may reach (health,
// /version, --authorization-always-allow-paths). The server's
// wiring (package server) puts them in one union with a host's
// authenticator; who may do what is package authorization.
package authentication
