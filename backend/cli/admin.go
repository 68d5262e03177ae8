package cli

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/term"

	"cubicle/backend"
	"cubicle/backend/auth"
	"cubicle/backend/fault"
	"cubicle/backend/store"
)

// runAdmin is `cubicle admin`: tasks on the server's own machine that need no login.
func runAdmin(ctx context.Context, e *env, args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprintln(e.stdout, "Usage: cubicle admin reset-password [--data-dir DIR] USER\n\n"+
			"  reset-password  set USER's password on this machine (read from the terminal, or one line of standard input);\n"+
			"                  every session of USER ends. Stop the server first: it holds the data file.")
		return nil
	}
	switch args[0] {
	case "reset-password":
		return runResetPassword(ctx, e, args[1:])
	}
	return fault.Invalid("unknown admin task %q; run `cubicle admin --help`", args[0])
}

func runResetPassword(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "admin reset-password", "cubicle admin reset-password [--data-dir DIR] USER")
	dataDir := fs.String("data-dir", defaultDataDir(e.getenv), "the server's data directory (env CUBICLE_DATA_DIR)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fault.Invalid("%v", err)
	}
	if fs.NArg() != 1 {
		return fault.Invalid("name the account: cubicle admin reset-password USER")
	}
	user := fs.Arg(0)
	if _, err := os.Stat(filepath.Join(*dataDir, backend.DBFile)); err != nil {
		return fault.NotFound("no Cubicle data in %s (%v); pass the server's --data-dir", *dataDir, err)
	}
	pw, err := readNewPassword(e, user)
	if err != nil {
		return err
	}
	if err := auth.CheckPassword(pw, user); err != nil {
		return err
	}
	st, err := store.Open(filepath.Join(*dataDir, backend.DBFile), store.Options{})
	if err != nil {
		if errors.Is(err, fault.ErrUnavailable) {
			return fault.Unavailable("%v (stop the Cubicle server first: the password is changed in its data file)", err)
		}
		return err
	}
	defer st.Close()
	key, err := auth.LoadOrCreateKey(filepath.Join(*dataDir, "secrets", "session.key"))
	if err != nil {
		return err
	}
	svc, err := auth.New(auth.Config{Accounts: st, Key: key})
	if err != nil {
		return err
	}
	acct, err := svc.ResetPassword(user, pw)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "The password of %s (%s) is set; every session of the account has ended.\n", acct.Username, acct.Role)
	if acct.Disabled {
		fmt.Fprintln(e.stdout, "The account is disabled: an administrator must enable it before it can log in.")
	}
	return ctx.Err()
}

// readNewPassword asks for the password twice on a terminal, or reads one line of input.
func readNewPassword(e *env, user string) (string, error) {
	if f, ok := e.stdin.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		fmt.Fprintf(e.stderr, "New password for %s: ", user)
		a, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(e.stderr)
		if err != nil {
			return "", fmt.Errorf("read the password: %w", err)
		}
		fmt.Fprint(e.stderr, "Again: ")
		b, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(e.stderr)
		if err != nil {
			return "", fmt.Errorf("read the password: %w", err)
		}
		if string(a) != string(b) {
			return "", fault.Invalid("the two passwords differ; nothing changed")
		}
		return string(a), nil
	}
	line, err := bufio.NewReader(io.LimitReader(e.stdin, 4096)).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("read the password from standard input: %w", err)
	}
	pw := strings.TrimRight(line, "\r\n")
	if pw == "" {
		return "", fault.Invalid("give the new password on standard input (one line) or run this in a terminal")
	}
	return pw, nil
}
