package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"cubicle/backend"
	"cubicle/backend/fault"
	"cubicle/backend/store"
)

// runRestoreBackup is `cubicle restore-backup [--data-dir DIR] [--list] [FILE]`: put a backup
// of the data file back (the newest sound one, or FILE), keeping the file it replaces. The
// data file is never deleted: it is moved aside as <file>.replaced-<time>.
func runRestoreBackup(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "restore-backup", "cubicle restore-backup [--data-dir DIR] [--list] [BACKUP-FILE]")
	dataDir := fs.String("data-dir", defaultDataDir(e.getenv), "the data directory whose data file to restore (env CUBICLE_DATA_DIR)")
	list := fs.Bool("list", false, "only list the backups, newest first, with the result of checking each")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fault.Invalid("%v", err)
	}
	if fs.NArg() > 1 {
		return fault.Invalid("name at most one backup file; run `cubicle restore-backup --list` to see them")
	}
	path := filepath.Join(*dataDir, backend.DBFile)
	bs, err := store.Backups(path)
	if err != nil {
		return err
	}
	if *list {
		if len(bs) == 0 {
			fmt.Fprintf(e.stdout, "no backups of %s\n", path)
			return nil
		}
		tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "TAKEN (UTC)\tSIZE\tKIND\tCHECK\tFILE")
		for _, b := range bs {
			kind := "rolling"
			if b.Migration {
				kind = "before migration"
			}
			verdict := "sound"
			if r, err := store.Check(b.Path, time.Second); err != nil {
				verdict = err.Error()
			} else if !r.OK() {
				verdict = "DAMAGED: " + strings.Join(r.Problems, "; ")
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", b.Time.UTC().Format("2006-01-02 15:04:05"), b.Size, kind, verdict, b.Path)
		}
		return tw.Flush()
	}
	from := fs.Arg(0)
	if from == "" {
		b, ok := store.NewestSoundBackup(path)
		if !ok {
			if len(bs) == 0 {
				return fault.NotFound("there is no backup of %s to restore", path)
			}
			return fault.NotFound("none of the %d backups of %s is sound (see cubicle restore-backup --list)", len(bs), path)
		}
		from = b.Path
	}
	replaced, err := store.Restore(path, from)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "restored %s from %s\n", path, from)
	if replaced != "" {
		fmt.Fprintf(e.stdout, "the file it replaced is kept as %s (delete it yourself once you no longer need it)\n", replaced)
	}
	fmt.Fprintln(e.stdout, "start Cubicle again; desktops are matched with what the container engine runs at start")
	return nil
}

// checkStore is `cubicle doctor --check-store`: the full check of the data file. It returns as
// soon as ctx ends (SIGTERM, Ctrl-C), whatever part of the check runs.
func checkStore(ctx context.Context, e *env, dataDir string) error {
	path := filepath.Join(dataDir, backend.DBFile)
	type result struct {
		r   store.CheckReport
		err error
	}
	done := make(chan result, 1)
	go func() { // owned: it ends with the check, which stops at ctx's end (store.CheckContext)
		r, err := store.CheckContext(ctx, path, 2*time.Second)
		done <- result{r, err}
	}()
	var r store.CheckReport
	select {
	case <-ctx.Done():
		fmt.Fprintf(e.stderr, "cubicle doctor: the check of %s was stopped; it changes nothing, so the file is as it was\n", path)
		return exitError{code: 130}
	case res := <-done:
		if res.err != nil {
			return res.err
		}
		r = res.r
	}
	if r.OK() {
		fmt.Fprintf(e.stdout, "data file %s is sound: %d bytes, %d buckets, %d records checked\n", path, r.Size, r.Buckets, r.Records)
		return nil
	}
	fmt.Fprintf(e.stdout, "data file %s is DAMAGED (%d bytes):\n", path, r.Size)
	for _, p := range r.Problems {
		fmt.Fprintf(e.stdout, "  - %s\n", p)
	}
	if b, ok := store.NewestSoundBackup(path); ok {
		fmt.Fprintf(e.stdout, "restore the newest sound backup (%s, taken %s UTC) with:\n  cubicle restore-backup --data-dir %s\n",
			b.Path, b.Time.UTC().Format("2006-01-02 15:04:05"), dataDir)
	} else {
		fmt.Fprintln(e.stdout, "there is no sound backup of it")
	}
	fmt.Fprintln(e.stderr, "cubicle doctor: the data file is damaged (see above)")
	return exitError{code: 1}
}
