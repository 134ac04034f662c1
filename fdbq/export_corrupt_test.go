package fdbq

// SetLocateBatch sets how many index entries one transaction of Remove's
// search reads, so that a test can make it page through a few jobs, and
// returns a function that restores it.
func SetLocateBatch(n int) (restore func()) {
	old := locateBatch
	locateBatch = n
	return func() { locateBatch = old }
}
