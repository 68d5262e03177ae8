package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"cubicle/backend/fault"
)

// The host file tools run in the sandbox too: this program is started again in it, in a file
// helper mode (envFile), which does the one operation and ends.
const (
	envFile  = "CUBICLE_SANDBOX_FILE" // read or write
	envPath  = "CUBICLE_SANDBOX_PATH"
	envMax   = "CUBICLE_SANDBOX_MAX"
	envProbe = "CUBICLE_SANDBOX_PROBE" // answer 0 at once (is the sandbox usable?)
	// helperFailed is the file helper's exit code for a refused or failed operation; its
	// standard error is then "class<TAB>message".
	helperFailed = 3
)

// ReadFile reads at most max bytes of path in the sandbox under p.
func (s *Sandbox) ReadFile(ctx context.Context, p Policy, path string, max int64) ([]byte, error) {
	if s.kind == None {
		if !p.AllowNone {
			return nil, s.refuse()
		}
		return ReadFileDirect(path, max)
	}
	return s.fileOp(ctx, p, []string{envFile + "=read", envPath + "=" + path, envMax + "=" + strconv.FormatInt(max, 10)}, nil, 1)
}

// WriteFile replaces path in the sandbox under p.
func (s *Sandbox) WriteFile(ctx context.Context, p Policy, path string, data []byte) error {
	if s.kind == None {
		if !p.AllowNone {
			return s.refuse()
		}
		return WriteFileDirect(path, data)
	}
	_, err := s.fileOp(ctx, p, []string{envFile + "=write", envPath + "=" + path}, data, 1)
	return err
}

// fileOp runs the file helper in the sandbox under p (attempt counts the runs, from 1).
func (s *Sandbox) fileOp(ctx context.Context, p Policy, env []string, stdin []byte, attempt int) ([]byte, error) {
	c, err := s.Wrap(ctx, p, []string{s.exe})
	if err != nil {
		return nil, err
	}
	defer c.Cleanup()
	cmd := exec.CommandContext(ctx, c.Argv[0], c.Argv[1:]...)
	cmd.Env = append(append(os.Environ(), c.Env...), env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	err = cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) && s.kind == Bwrap && SetupRaced(ee.ExitCode(), errOut.Bytes()) && attempt < SetupAttempts {
		return s.fileOp(ctx, p, env, stdin, attempt+1) // the sandbox was not made: nothing ran
	}
	switch {
	case err == nil:
		return out.Bytes(), nil
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case errors.As(err, &ee) && ee.ExitCode() == helperFailed:
		class, msg, _ := strings.Cut(strings.TrimSpace(errOut.String()), "\t")
		switch class {
		case "notfound":
			return nil, fault.NotFound("%s", msg)
		case "forbidden":
			return nil, fault.Forbidden("%s", msg)
		case "invalid":
			return nil, fault.Invalid("%s", msg)
		}
		return nil, fmt.Errorf("%s", msg)
	}
	return nil, fault.Unavailable("the %s sandbox did not run the file operation: %v: %s", s.kind, err, strings.TrimSpace(errOut.String()))
}

// fileHelper is the file helper mode: it does the operation envFile names and exits.
func fileHelper(op string) {
	path := os.Getenv(envPath)
	var err error
	switch op {
	case "read":
		max, _ := strconv.ParseInt(os.Getenv(envMax), 10, 64)
		var data []byte
		if data, err = ReadFileDirect(path, max); err == nil {
			_, err = os.Stdout.Write(data)
		}
	case "write":
		var data []byte
		if data, err = io.ReadAll(os.Stdin); err == nil {
			err = WriteFileDirect(path, data)
		}
	default:
		err = fault.Invalid("unknown file operation %q", op)
	}
	if err == nil {
		os.Exit(0)
	}
	class := "other"
	switch {
	case errors.Is(err, fault.ErrNotFound):
		class = "notfound"
	case errors.Is(err, fault.ErrForbidden):
		class = "forbidden"
	case errors.Is(err, fault.ErrInvalid):
		class = "invalid"
	}
	fmt.Fprintf(os.Stderr, "%s\t%s", class, strings.ReplaceAll(err.Error(), "\n", " "))
	os.Exit(helperFailed)
}

// ReadFileDirect reads at most max bytes of path, without a sandbox.
func ReadFileDirect(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fileErr(path, err, false)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fileErr(path, err, false)
	}
	if st.IsDir() {
		return nil, fault.Invalid("%s is a directory", path)
	}
	if st.Size() > max {
		return nil, fault.Invalid("%s is %d bytes, more than the %d allowed", path, st.Size(), max)
	}
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, fileErr(path, err, false)
	}
	if int64(len(data)) > max {
		return nil, fault.Invalid("%s grew past the %d bytes allowed", path, max)
	}
	return data, nil
}

// WriteFileDirect replaces path atomically (temp file + rename), creating parent
// directories, without a sandbox.
func WriteFileDirect(path string, data []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fileErr(dir, err, true)
	}
	mode := os.FileMode(0o644)
	if st, err := os.Stat(path); err == nil {
		mode = st.Mode().Perm()
	}
	tmp, err := os.CreateTemp(dir, ".cubicle-*")
	if err != nil {
		return fileErr(dir, err, true)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fileErr(path, err, true)
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return fileErr(path, err, true)
	}
	if err := tmp.Close(); err != nil {
		return fileErr(path, err, true)
	}
	return fileErr(path, os.Rename(tmp.Name(), path), true)
}

func fileErr(path string, err error, write bool) error {
	verb := "read"
	if write {
		verb = "write"
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, fs.ErrNotExist):
		return fault.NotFound("%s does not exist", path)
	case errors.Is(err, fs.ErrPermission), errors.Is(err, errReadOnly):
		return fault.Forbidden("permission denied: %s (the sandbox, or the file's permissions, refused %s access)", path, verb)
	}
	return fmt.Errorf("%s: %w", path, err)
}
