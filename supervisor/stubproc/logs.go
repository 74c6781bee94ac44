package stubproc

import (
	"bufio"
	"io"
	"strings"

	"github.com/hashicorp/go-hclog"
)

// forwardLines copies each line a stub writes to stdout or stderr into the
// instance's logger. A Python traceback switches the rest of the stream to
// error level, as a panic does for Go stubs.
func forwardLines(r io.Reader, log hclog.Logger, level hclog.Level) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "Traceback (most recent call last)") || strings.HasPrefix(line, "panic: ") {
			level = hclog.Error
		}
		log.Log(level, line)
	}
}

// stubLogLevel maps a pb_utils.Logger level to an hclog level.
func stubLogLevel(level string) hclog.Level {
	switch level {
	case "ERROR":
		return hclog.Error
	case "WARNING", "WARN":
		return hclog.Warn
	case "VERBOSE":
		return hclog.Debug
	default:
		return hclog.Info
	}
}
