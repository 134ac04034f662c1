package fdbq

// WaitWatchStats returns the watches on job records the queue's waits
// hold (made or being made) and the references its waits hold on the
// shared watches it hands out.
func (q *Queue) WaitWatchStats() (jobWatches, refs int) { return q.watches.watchStats() }
