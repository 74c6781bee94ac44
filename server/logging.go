package server

import (
	"net/http"
	"sync"

	"github.com/hashicorp/go-hclog"

	"github.com/stubvisor/stubvisor/backendapi"
)

// logSettings implements the logging extension (GET/POST /v2/logging) on
// top of an hclog logger. Triton's switches are independent (info, warning,
// error, a verbose level); hclog has one threshold, so the logger gets the
// most verbose level any enabled switch asks for, and the settings
// themselves are remembered as the client set them.
type logSettings struct {
	mu     sync.Mutex
	logger hclog.Logger
	logState
}

// logState is what a client can set.
type logState struct {
	info    bool
	warning bool
	error   bool
	verbose uint64
	format  string
}

// Log formats the extension accepts.
const (
	logFormatDefault = "default"
	logFormatISO8601 = "ISO8601"
)

func newLogSettings(l hclog.Logger) *logSettings {
	ls := &logSettings{logger: l}
	ls.format = logFormatDefault
	switch l.GetLevel() {
	case hclog.Trace:
		ls.info, ls.warning, ls.error, ls.verbose = true, true, true, 2
	case hclog.Debug:
		ls.info, ls.warning, ls.error, ls.verbose = true, true, true, 1
	case hclog.Warn:
		ls.warning, ls.error = true, true
	case hclog.Error:
		ls.error = true
	case hclog.Off:
	default:
		ls.info, ls.warning, ls.error = true, true, true
	}
	return ls
}

// level is the hclog threshold that shows everything the switches enable.
func (ls *logState) level() hclog.Level {
	switch {
	case ls.verbose >= 2:
		return hclog.Trace
	case ls.verbose == 1:
		return hclog.Debug
	case ls.info:
		return hclog.Info
	case ls.warning:
		return hclog.Warn
	case ls.error:
		return hclog.Error
	}
	return hclog.Off
}

// logSettingsJSON is the extension's reply: always all six keys.
type logSettingsJSON struct {
	LogFile         string `json:"log_file"`
	LogInfo         bool   `json:"log_info"`
	LogWarning      bool   `json:"log_warning"`
	LogError        bool   `json:"log_error"`
	LogVerboseLevel uint64 `json:"log_verbose_level"`
	LogFormat       string `json:"log_format"`
}

func (ls *logSettings) snapshot() logSettingsJSON {
	return logSettingsJSON{
		LogInfo:         ls.info,
		LogWarning:      ls.warning,
		LogError:        ls.error,
		LogVerboseLevel: ls.verbose,
		LogFormat:       ls.format,
	}
}

// update applies a POST body. Every member is checked before any is
// applied; null members are ignored.
func (ls *logSettings) update(body []byte) error {
	obj, err := parseJSONObject(body, false)
	if err != nil {
		return err
	}
	if raw, ok := obj["log_file"]; ok && !isNull(raw) {
		return backendapi.Errorf(backendapi.Unsupported, "log file location can not be updated through network protocol")
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	next := logState{info: ls.info, warning: ls.warning, error: ls.error, verbose: ls.verbose, format: ls.format}
	for _, b := range []struct {
		key string
		dst *bool
	}{{"log_info", &next.info}, {"log_warning", &next.warning}, {"log_error", &next.error}} {
		if raw, ok := obj[b.key]; ok && !isNull(raw) {
			if *b.dst, err = rawBool(raw); err != nil {
				return err
			}
		}
	}
	if raw, ok := obj["log_verbose_level"]; ok && !isNull(raw) {
		if next.verbose, err = rawUint(raw); err != nil {
			return err
		}
	}
	if raw, ok := obj["log_format"]; ok && !isNull(raw) {
		f, err := rawString(raw)
		if err != nil {
			return err
		}
		if f != logFormatDefault && f != logFormatISO8601 {
			return backendapi.Errorf(backendapi.Unavailable, "invalid argument for --log_format, got: %s", f)
		}
		next.format = f
	}
	ls.logState = next
	ls.logger.SetLevel(ls.level())
	return nil
}

func (s *Server) handleLogging(w http.ResponseWriter, r *http.Request) {
	if !allow(w, r, http.MethodGet, http.MethodPost) {
		return
	}
	if r.Method == http.MethodPost {
		body, err := readControlBody(r, s.maxInput)
		if err == nil {
			err = s.logging.update(body)
		}
		if err != nil {
			writeError(w, err)
			return
		}
	}
	s.logging.mu.Lock()
	snap := s.logging.snapshot()
	s.logging.mu.Unlock()
	writeJSON(w, snap)
}
