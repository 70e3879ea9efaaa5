package limit

// ErrStoreTripped is the error a resting guard fails with, for the tests
// of package limit_test.
var ErrStoreTripped = errStoreTripped

// Tripped reports whether the guard of s, which Guard returned, is resting
// its store.
func Tripped(s Store) bool { return s.(*guarded).tripped() }
