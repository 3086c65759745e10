//go:build !unix

package embeddedetcd

import "os"

// ownedByUs cannot tell on this platform; the temporary directory there is
// the user's own.
func ownedByUs(os.FileInfo) bool { return true }
