package cachetest

import (
	"context"
	"net"
	"sync"
)

// ConnTracker dials TCP and can cut every connection it made, as a network
// failure or the exit of a server process would. Use Dial as a
// rest.Config's Dial.
type ConnTracker struct {
	dialer net.Dialer
	mu     sync.Mutex
	conns  []net.Conn
}

// Dial dials like net.Dialer and remembers the connection for CutAll.
func (c *ConnTracker) Dial(ctx context.Context, network, address string) (net.Conn, error) {
	conn, err := c.dialer.DialContext(ctx, network, address)
	if err == nil {
		c.mu.Lock()
		c.conns = append(c.conns, conn)
		c.mu.Unlock()
	}
	return conn, err
}

// CutAll closes every connection dialled so far, watches included.
func (c *ConnTracker) CutAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, conn := range c.conns {
		_ = conn.Close()
	}
	c.conns = nil
}
