//go:build unix && !linux

package handlers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"syscall"
)

// supervised reports whether commands can run here: they can, as children
// of this process, without a supervisor.
func supervised() error { return nil }

// runCommand runs the command as a child of this process, leading a
// process group of its own. Cancellation kills the group, and so does the
// command's exit: what it left running in its group goes with it. A process
// that leaves the group (setsid, setpgid) survives, and nothing is killed
// when this process dies.
func (r *execRunner) runCommand(ctx context.Context, env []string, stdin io.Reader, stdout, stderr io.Writer) (syscall.WaitStatus, error) {
	cmd := exec.CommandContext(ctx, r.prog, r.args...)
	cmd.Dir = r.dir
	cmd.Env = env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return killGroup(cmd.Process.Pid) }
	cmd.WaitDelay = execWaitDelay
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("handlers: exec: start %s: %w", r.name, err)
	}
	err := cmd.Wait()
	// While one process of the group lives its id is not given to a new
	// process; when none does, the kill finds no group.
	_ = killGroup(cmd.Process.Pid)
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok {
			return ws, nil
		}
	}
	if err != nil {
		return 0, fmt.Errorf("handlers: exec: %s: %w", r.name, err)
	}
	return cmd.ProcessState.Sys().(syscall.WaitStatus), nil
}

// killGroup kills the process group led by pid; a group already gone is
// not an error.
func killGroup(pid int) error {
	err := syscall.Kill(-pid, syscall.SIGKILL)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}
