package api

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"

	"cubicle/backend/fault"
)

// status maps an error class to its HTTP status and its code word (fault.Code). It is the
// only place that maps a class to a status.
func status(err error) (int, string) {
	word := fault.Code(err)
	switch fault.Class(err) {
	case fault.ErrNotFound:
		return http.StatusNotFound, word
	case fault.ErrExists, fault.ErrConflict:
		return http.StatusConflict, word
	case fault.ErrInvalid:
		return http.StatusBadRequest, word
	case fault.ErrForbidden:
		return http.StatusForbidden, word
	case fault.ErrUnauthenticated:
		return http.StatusUnauthorized, word
	case fault.ErrUnavailable:
		return http.StatusServiceUnavailable, word
	case fault.ErrTooMany:
		return http.StatusTooManyRequests, word
	}
	return http.StatusInternalServerError, word
}

// errorBody is the JSON every failed call returns.
type errorBody struct {
	Error string `json:"error"`
	Code  string `json:"code"`
}

// writeError answers with err's class and message. Errors of no class are logged and their
// text is not shown (it may carry internals); a 503 (something this server needs does not
// answer now) is logged as a warning, so that a failed call in a browser names its cause in
// the server's log too.
func writeError(w http.ResponseWriter, r *http.Request, log *slog.Logger, err error) {
	code, word := status(err)
	msg := err.Error()
	switch code {
	case http.StatusInternalServerError:
		log.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
		msg = "internal error; see the Cubicle log for details"
	case http.StatusServiceUnavailable:
		log.Warn("request failed: unavailable", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	writeJSON(w, code, errorBody{Error: msg, Code: word})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	if v != nil {
		_ = json.NewEncoder(w).Encode(v)
	}
}

// decode reads a JSON body of at most 1 MiB into v. It reads the body to its end, which also
// lifts the body's read deadline before a long answer.
func decode(r *http.Request, v any) error {
	body := http.MaxBytesReader(nil, r.Body, BodyLimit(r.URL.Path))
	dec := json.NewDecoder(body)
	if err := dec.Decode(v); err != nil {
		return fault.Invalid("the request body is not valid JSON for this call: %v", err)
	}
	io.Copy(io.Discard, body)
	return nil
}
