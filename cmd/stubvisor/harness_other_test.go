//go:build !linux

package main

import "os/exec"

func startTied(cmd *exec.Cmd) error { return cmd.Start() }
