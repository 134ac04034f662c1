package proctest

import (
	"errors"
	"slices"
	"time"

	"golang.org/x/sys/unix"
)

// WaitExit waits, up to limit, for the processes behind the pidfds of fds
// (pidfd → a name for it) to end: a pidfd becomes readable then, and never
// names a process that took its pid over. It returns the names of those
// that live on, which it has killed.
func WaitExit(fds map[int]string, limit time.Duration) ([]string, error) {
	var poll []unix.PollFd
	for fd := range fds {
		poll = append(poll, unix.PollFd{Fd: int32(fd), Events: unix.POLLIN})
	}
	deadline := time.Now().Add(limit)
	for len(poll) > 0 {
		n, err := unix.Poll(poll, int(max(time.Until(deadline), 0)/time.Millisecond))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n == 0 {
			var alive []string
			for _, p := range poll {
				alive = append(alive, fds[int(p.Fd)])
				unix.PidfdSendSignal(int(p.Fd), unix.SIGKILL, nil, 0)
			}
			return alive, nil
		}
		poll = slices.DeleteFunc(poll, func(p unix.PollFd) bool { return p.Revents != 0 })
	}
	return nil, nil
}
