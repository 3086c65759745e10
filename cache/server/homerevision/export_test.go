package homerevision

// SetInitPageSize makes the initialisation read pages of n keys, for a test
// to cross pages with a few keys.
func (t *Tracker) SetInitPageSize(n int64) { t.pageSize = n }
