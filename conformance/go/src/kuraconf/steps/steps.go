// Package steps runs a Go scenario's steps and prints one line each for the harness:
// "ok SECONDS NAME" or "FAIL SECONDS NAME: DETAIL" (conformance/harness/scenarios/goscenario.py).
// The scenarios find it through GOPATH (conformance/run adds conformance/go to it).
package steps

import (
	"fmt"
	"os"
	"strings"
	"time"
)

// Step is one row of the harness's table.
type Step struct {
	Name string
	Run  func() error
}

// RunAll runs every step, even after one fails, and exits 1 if any failed.
func RunAll(all []Step) {
	failed := false
	for _, s := range all {
		start := time.Now()
		err := s.Run()
		secs := time.Since(start).Seconds()
		if err != nil {
			failed = true
			fmt.Printf("FAIL %.2f %s: %s\n", secs, s.Name, strings.ReplaceAll(err.Error(), "\n", " "))
		} else {
			fmt.Printf("ok %.2f %s\n", secs, s.Name)
		}
	}
	if failed {
		os.Exit(1)
	}
}

// Fatal prints a setup error and exits 2: the harness then records one failed row.
func Fatal(err error) {
	fmt.Fprintln(os.Stderr, err)
	os.Exit(2)
}
