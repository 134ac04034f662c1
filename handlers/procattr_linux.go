package handlers

import "syscall"

// procAttr puts the command in a process group of its own and has the
// kernel kill it (SIGKILL) when the thread that started it, and so this
// process, dies.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
