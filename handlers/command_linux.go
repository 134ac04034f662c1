package handlers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
)

// runCommand runs the command under a supervisor (see supervise_linux.go)
// and returns how it ended. Cancellation closes the lifeline: the
// supervisor then kills the command's whole process tree and exits.
func (r *execRunner) runCommand(ctx context.Context, env []string, stdin io.Reader, stdout, stderr io.Writer) (syscall.WaitStatus, error) {
	lifeR, lifeW, err := os.Pipe()
	if err != nil {
		return 0, fmt.Errorf("handlers: exec: start %s: %w", r.name, err)
	}
	defer lifeW.Close()
	statusR, statusW, err := os.Pipe()
	if err != nil {
		lifeR.Close()
		return 0, fmt.Errorf("handlers: exec: start %s: %w", r.name, err)
	}
	defer statusR.Close()

	cmd := exec.CommandContext(ctx, selfExe)
	cmd.Args = append([]string{supervisorArg0, r.prog}, r.args...)
	cmd.Dir = r.dir
	cmd.Env = env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
	cmd.ExtraFiles = []*os.File{lifeR, statusW} // fds 3 and 4
	// A group of its own keeps a terminal's signals (^C) from the
	// supervisor: this process decides when the command stops.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = lifeW.Close
	// Should the supervisor not exit soon after the lifeline is cut, it is
	// killed, and its Pdeathsig takes the command down.
	cmd.WaitDelay = execWaitDelay
	err = cmd.Start()
	lifeR.Close()
	statusW.Close()
	if err != nil {
		return 0, fmt.Errorf("handlers: exec: start %s: %w", r.name, err)
	}
	err = cmd.Wait()
	b, _ := io.ReadAll(io.LimitReader(statusR, 64<<10))
	kind, text, _ := strings.Cut(strings.TrimSpace(string(b)), " ")
	switch kind {
	case statusExited:
		if n, perr := strconv.ParseUint(text, 10, 32); perr == nil {
			if err != nil && !isExitError(err) {
				return 0, fmt.Errorf("handlers: exec: %s: %w", r.name, err)
			}
			return syscall.WaitStatus(n), nil
		}
	case statusStart:
		return 0, fmt.Errorf("handlers: exec: start %s: %s", r.name, text)
	case statusStopped:
		return 0, fmt.Errorf("handlers: exec: %s killed", r.name)
	}
	if err == nil {
		err = errors.New("exited without saying how the command ended")
	}
	return 0, fmt.Errorf("handlers: exec: %s: supervisor: %w", r.name, err)
}

func isExitError(err error) bool {
	var e *exec.ExitError
	return errors.As(err, &e)
}
