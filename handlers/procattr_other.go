//go:build unix && !linux

package handlers

import "syscall"

// procAttr puts the command in a process group of its own.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
