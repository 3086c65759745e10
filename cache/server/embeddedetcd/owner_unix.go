//go:build unix

package embeddedetcd

import (
	"os"
	"syscall"
)

// ownedByUs reports whether this process's user owns the file.
func ownedByUs(info os.FileInfo) bool {
	st, ok := info.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == os.Getuid()
}
