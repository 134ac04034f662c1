package tuple

// Versionstamp is a 12-byte FoundationDB versionstamp: the 10-byte
// transaction version assigned at commit (8-byte commit version and 2-byte
// batch order, both big-endian) followed by a user version that orders keys
// written by the same transaction.
type Versionstamp struct {
	TransactionVersion [10]byte
	UserVersion        uint16
}

// incompleteTransactionVersion marks a versionstamp whose transaction
// version the database has yet to fill in. No committed transaction gets it.
var incompleteTransactionVersion = [10]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// IncompleteVersionstamp returns a versionstamp with the given user version
// whose transaction version is to be assigned at commit. Pack a tuple holding
// it with Tuple.PackWithVersionstamp or Subspace.PackWithVersionstamp.
func IncompleteVersionstamp(userVersion uint16) Versionstamp {
	return Versionstamp{TransactionVersion: incompleteTransactionVersion, UserVersion: userVersion}
}

// IsComplete reports whether v has a transaction version, that is, whether
// it is not all 0xff bytes.
func (v Versionstamp) IsComplete() bool {
	return v.TransactionVersion != incompleteTransactionVersion
}
