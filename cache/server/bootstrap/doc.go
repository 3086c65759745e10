// Package bootstrap declares the types a cache server serves from the start
// and installs them: the schema-less CRDs of the kcp profile and of the
// shards' heartbeats (crds.go, heartbeat.go), and the Installer that
// creates or updates them in the system partition at start and reports a
// declaration that conflicts with stored data (installer.go).
package bootstrap
