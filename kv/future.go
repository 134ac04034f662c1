package kv

import (
	"context"
	"sync"
)

// Future is a value that becomes ready later, such as a transaction's
// versionstamp, which exists only once the transaction committed.
type Future[T any] struct {
	once sync.Once
	done chan struct{}
	val  T
	err  error
}

// NewFuture returns a future that is not ready yet.
func NewFuture[T any]() *Future[T] { return &Future[T]{done: make(chan struct{})} }

// Resolve makes the future ready with v or err. Only the first call counts;
// it reports whether this call was the one.
func (f *Future[T]) Resolve(v T, err error) (resolved bool) {
	f.once.Do(func() {
		f.val, f.err = v, err
		close(f.done)
		resolved = true
	})
	return resolved
}

// Ready is closed when the future is ready.
func (f *Future[T]) Ready() <-chan struct{} { return f.done }

// Get waits for the future or for ctx to end.
func (f *Future[T]) Get(ctx context.Context) (T, error) {
	select {
	case <-f.done:
		return f.val, f.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}

// ChanWatch is a Watch backed by a channel, for backends that deliver watch
// events from Go code.
type ChanWatch struct {
	f        *Future[struct{}]
	onCancel func()
}

// NewChanWatch returns a pending watch; onCancel (may be nil) runs once
// when the watch is cancelled before it fired, to unregister it.
func NewChanWatch(onCancel func()) *ChanWatch {
	return &ChanWatch{f: NewFuture[struct{}](), onCancel: onCancel}
}

// Fire makes the watch ready with err (nil: the key changed). It reports
// whether the watch was still pending.
func (w *ChanWatch) Fire(err error) bool { return w.f.Resolve(struct{}{}, err) }

// Ready implements Watch.
func (w *ChanWatch) Ready() <-chan struct{} { return w.f.Ready() }

// Wait implements Watch.
func (w *ChanWatch) Wait(ctx context.Context) error {
	_, err := w.f.Get(ctx)
	return err
}

// Cancel implements Watch.
func (w *ChanWatch) Cancel() {
	if w.Fire(ErrTransactionCancelled) && w.onCancel != nil {
		w.onCancel()
	}
}
