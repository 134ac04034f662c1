package handlers

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// On Linux a command does not run as this process's child but as the child
// of a supervisor: this same executable (/proc/self/exe) started again with
// supervisorArg0 as its argv[0]. The supervisor
//
//   - makes itself a child subreaper (PR_SET_CHILD_SUBREAPER), so that
//     every process the command starts, however deep and whatever session
//     or group it moves to (setsid, a double fork), stays its descendant:
//     an orphan is reparented to it, not to init;
//   - starts the command, in a process group of its own, with Pdeathsig
//     set, so that the command dies at least if the supervisor is killed;
//   - holds the read end of a pipe (the lifeline, fd 3) whose write end only
//     the handler holds. End of file on it means the handler wants the
//     command killed (the job's context ended) or this process is gone,
//     however it died (kill -9 included): the kernel closes the write end
//     of a dead process;
//   - when the command exits, or the lifeline ends, or it is sent SIGTERM,
//     SIGINT or SIGHUP, kills (SIGKILL) every descendant it has, again and
//     again as orphans are reparented to it, until it has no child left;
//   - then writes how the command ended on the status pipe (fd 4) and
//     exits.
//
// Any program that imports this package runs as a supervisor when started
// so: the package's init function takes over before main runs.
const (
	supervisorArg0 = "jobstage-exec-supervisor"
	selfExe        = "/proc/self/exe"
	lifelineFD     = 3
	statusFD       = 4
)

// Status lines the supervisor writes on the status pipe.
const (
	statusExited  = "w" // "w <wait status>": the command ended so
	statusStart   = "e" // "e <message>": the command could not be started
	statusStopped = "k" // "k": killed on request; the command's status is moot
)

func init() {
	if len(os.Args) >= 2 && os.Args[0] == supervisorArg0 {
		// Not os.Exit: it runs exit hooks a supervisor has no use for
		// (the race detector's waits a second for reports).
		syscall.Exit(supervise(os.Args[1:]))
	}
}

// supervised reports whether commands run under a supervisor here.
func supervised() error {
	if _, err := os.Stat(selfExe); err != nil {
		return fmt.Errorf("commands run under a supervisor started from %s: %w", selfExe, err)
	}
	return nil
}

type reaped struct {
	pid int
	ws  unix.WaitStatus
}

// supervise is the supervisor's main: argv is the command.
func supervise(argv []string) int {
	syscall.CloseOnExec(lifelineFD)
	syscall.CloseOnExec(statusFD)
	lifeline := os.NewFile(lifelineFD, "lifeline")
	status := os.NewFile(statusFD, "status")
	report := func(kind, text string) {
		fmt.Fprintf(status, "%s %s\n", kind, text)
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		report(statusStart, "cannot become a child subreaper: "+err.Error())
		return 1
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)

	pid, err := startCommand(argv)
	if err != nil {
		report(statusStart, err.Error())
		return 0
	}
	reapc := reap()
	cut := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, lifeline)
		close(cut)
	}()

	var exit *unix.WaitStatus
wait:
	for {
		select {
		case r, ok := <-reapc:
			if !ok {
				break wait // cannot happen before the command is reaped
			}
			if r.pid == pid {
				exit = &r.ws
				break wait
			}
		case <-cut:
			break wait
		case <-stop:
			break wait
		}
	}
	killTree(reapc)
	if exit == nil {
		report(statusStopped, "")
	} else {
		report(statusExited, strconv.FormatUint(uint64(*exit), 10))
	}
	return 0
}

// startCommand starts the command in a process group of its own, with
// Pdeathsig set, and returns its pid. The supervisor keeps no handle on
// it: the reaper waits for it, with every other child. It then lets go of
// the command's stdin and stdout, so that they close when the command's
// processes close them (the handler's writer learns at once that nobody
// reads stdin); it keeps stderr for its own errors.
func startCommand(argv []string) (int, error) {
	p, err := os.StartProcess(argv[0], argv, &os.ProcAttr{
		Env:   os.Environ(),
		Files: []*os.File{os.Stdin, os.Stdout, os.Stderr},
		Sys:   &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL},
	})
	if err != nil {
		return 0, err
	}
	pid := p.Pid
	_ = p.Release() // the reaper waits for it, with every other child
	if null, err := os.Open(os.DevNull); err == nil {
		_ = unix.Dup3(int(null.Fd()), 0, 0)
		_ = unix.Dup3(int(null.Fd()), 1, 0)
		null.Close()
	}
	return pid, nil
}

// reap starts the reaper, which waits for any child, the command and the
// orphans that become ours alike, and sends each on the channel reap
// returns, until there is none (ECHILD): then it closes the channel.
func reap() <-chan reaped {
	reapc := make(chan reaped)
	go func() {
		defer close(reapc)
		for {
			var ws unix.WaitStatus
			got, err := unix.Wait4(-1, &ws, unix.WALL, nil)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil {
				return
			}
			reapc <- reaped{got, ws}
		}
	}()
	return reapc
}

// killTree kills every descendant of this process until it has no child
// left, passing over the tree again after each death among its children
// (a killed process's children become ours first) and every 100 ms while
// any lives. It gives up after execWaitDelay: a process it may not signal
// (one that changed to another user) would otherwise keep the supervisor,
// and the job, waiting forever.
func killTree(reapc <-chan reaped) {
	self := os.Getpid()
	deadline := time.Now().Add(execWaitDelay)
	for time.Now().Before(deadline) {
		for _, pid := range descendants(self) {
			killProcess(pid, self)
		}
		select {
		case _, ok := <-reapc:
			if !ok {
				return
			}
		case <-time.After(100 * time.Millisecond):
			// A process missed by the last pass (forked or reparented
			// while the tree was read) is found by the next.
		}
	}
}

// killProcess sends SIGKILL to pid. Through a pidfd when the system has
// them, checking after opening it that the process is still in the tree,
// so that a pid reused meanwhile by another process is not signalled.
func killProcess(pid, self int) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		if errors.Is(err, unix.ENOSYS) {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
		return
	}
	defer unix.Close(fd)
	if ppid, ok := parentOf(pid); !ok || !inTree(ppid, self) {
		return
	}
	_ = unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
}

// inTree reports whether pid is self or one of its descendants.
func inTree(pid, self int) bool {
	for range 1 << 16 {
		if pid == self {
			return true
		}
		if pid <= 1 {
			return false
		}
		ppid, ok := parentOf(pid)
		if !ok {
			return false
		}
		pid = ppid
	}
	return false
}

// descendants returns the processes below root: read from the children
// files of /proc/<pid>/task/<tid>, or, where the kernel has none, from the
// parent of every process in /proc. A process forked or reparented while
// they are read may be missed; killTree reads them again.
func descendants(root int) []int {
	if !haveChildrenFiles {
		return descendantsByScan(root)
	}
	var out []int
	next := childrenOf(root)
	for len(next) > 0 {
		pid := next[len(next)-1]
		next = next[:len(next)-1]
		out = append(out, pid)
		next = append(next, childrenOf(pid)...)
	}
	return out
}

var haveChildrenFiles = func() bool {
	pid := strconv.Itoa(os.Getpid())
	_, err := os.Stat("/proc/" + pid + "/task/" + pid + "/children")
	return err == nil
}()

// childrenOf returns the children of pid's threads.
func childrenOf(pid int) []int {
	dir := "/proc/" + strconv.Itoa(pid) + "/task/"
	d, err := os.Open(dir)
	if err != nil {
		return nil
	}
	tids, _ := d.Readdirnames(-1)
	d.Close()
	var out []int
	for _, tid := range tids {
		for f := range strings.FieldsSeq(readProc(dir + tid + "/children")) {
			if c, err := strconv.Atoi(f); err == nil {
				out = append(out, c)
			}
		}
	}
	return out
}

func descendantsByScan(root int) []int {
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	names, _ := d.Readdirnames(-1)
	d.Close()
	children := map[int][]int{}
	for _, n := range names {
		pid, err := strconv.Atoi(n)
		if err != nil {
			continue
		}
		if ppid, ok := parentOf(pid); ok {
			children[ppid] = append(children[ppid], pid)
		}
	}
	var out []int
	next := children[root]
	for len(next) > 0 {
		pid := next[len(next)-1]
		next = next[:len(next)-1]
		out = append(out, pid)
		next = append(next, children[pid]...)
	}
	return out
}

// parentOf reads pid's parent from /proc/<pid>/stat.
func parentOf(pid int) (int, bool) {
	line := readProc("/proc/" + strconv.Itoa(pid) + "/stat")
	// pid (comm) state ppid …; comm may hold spaces and parentheses.
	i := strings.LastIndexByte(line, ')')
	if i < 0 {
		return 0, false
	}
	fields := strings.Fields(line[i+1:])
	if len(fields) < 2 {
		return 0, false
	}
	ppid, err := strconv.Atoi(fields[1])
	return ppid, err == nil
}

// readProc returns the start of a small /proc file, "" if it cannot be
// read. It calls the system directly: os.Open's set-up for the poller
// costs more than the read on a file of /proc.
func readProc(path string) string {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return ""
	}
	defer unix.Close(fd)
	var buf [4096]byte
	n, err := unix.Read(fd, buf[:])
	if err != nil || n <= 0 {
		return ""
	}
	return string(buf[:n])
}
