//go:build !race

package main

// raceEnabled: the suite runs under -race, and so does the binary it builds.
const raceEnabled = false
