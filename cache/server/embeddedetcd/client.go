package embeddedetcd

import (
	"crypto/tls"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// NewClient returns a client of the etcd members at endpoints, over TLS
// when tlsConfig is set. It is the one way this module makes an etcd
// client, the server's and the tests' alike. Errors come back to the
// callers, which log them; the client's own zap logging is off, as it would
// only repeat them outside the structured log.
func NewClient(endpoints []string, tlsConfig *tls.Config, dialTimeout time.Duration) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: endpoints, TLS: tlsConfig, DialTimeout: dialTimeout, Logger: zap.NewNop()})
}
