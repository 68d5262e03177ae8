package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"cubicle/backend"
	"cubicle/backend/engineconn"
	"cubicle/backend/housekeeping"
	"cubicle/backend/store"
)

// names is a repeatable string flag.
type names []string

func (n *names) String() string     { return strings.Join(*n, ",") }
func (n *names) Set(v string) error { *n = append(*n, v); return nil }

// leftovers is the housekeeping part of `cubicle doctor`: it lists what Cubicle left on the
// engine and, with --clean, removes the leftover containers and unused image tags; volumes
// (someone's work files) only when named with --remove-volume. Without a reachable engine it
// says so and does nothing.
func leftovers(ctx context.Context, e *env, dataDir, engineKind string, clean bool, volumes []string) error {
	log := slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	ce, err := engineconn.ConnectEngine(cctx, engineKind, log)
	cancel()
	if err != nil {
		fmt.Fprintf(e.stdout, "\nLeftovers: not checked (%v)\n", err)
		if clean || len(volumes) > 0 {
			return err
		}
		return nil
	}
	defer ce.Close()
	var records housekeeping.Records
	if _, err := os.Stat(filepath.Join(dataDir, backend.DBFile)); err == nil {
		st, err := store.Open(filepath.Join(dataDir, backend.DBFile), store.Options{LockTimeout: 500 * time.Millisecond})
		if err == nil {
			defer st.Close()
			records = st
		}
	} else if errors.Is(err, os.ErrNotExist) {
		records = noRecords{} // no data file: nothing of this directory is known
	}
	h, err := backend.NewHousekeeper(ce.Client, dataDir, records, log)
	if err != nil {
		return err
	}
	rep, err := h.Scan(ctx)
	if err != nil {
		return err
	}
	printLeftovers(e, rep)
	if !clean && len(volumes) == 0 {
		if !rep.Empty() {
			fmt.Fprintln(e.stdout, "Remove the containers and image tags with `cubicle doctor --clean`; a volume only with "+
				"`--remove-volume NAME` (it holds someone's work files).")
		}
		return nil
	}
	sel := housekeeping.Selection{Volumes: volumes}
	if clean {
		for _, c := range rep.Containers {
			sel.Containers = append(sel.Containers, c.Name)
		}
		for _, i := range rep.Images {
			sel.Images = append(sel.Images, i.Ref)
		}
	}
	if len(sel.Containers)+len(sel.Volumes)+len(sel.Images) == 0 {
		fmt.Fprintln(e.stdout, "Nothing to clean up.")
		return nil
	}
	outs, err := h.Clean(ctx, sel)
	if err != nil {
		return err
	}
	failed := 0
	for _, o := range outs {
		if o.Removed {
			fmt.Fprintf(e.stdout, "removed %s %s\n", o.Kind, o.Name)
		} else {
			failed++
			fmt.Fprintf(e.stdout, "kept %s %s: %s\n", o.Kind, o.Name, o.Error)
		}
	}
	if failed > 0 {
		return exitError{code: 1}
	}
	return nil
}

func printLeftovers(e *env, rep housekeeping.Report) {
	fmt.Fprintln(e.stdout)
	if rep.Empty() {
		fmt.Fprintln(e.stdout, "Leftovers: none (no stray desktop containers, volumes or unused desktop images).")
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	if len(rep.Containers) > 0 {
		fmt.Fprintln(tw, "LEFTOVER CONTAINER\tSTATE\tDATA DIRECTORY\tWHY")
		for _, c := range rep.Containers {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", c.Name, c.State, c.DataDir, c.Why)
		}
		fmt.Fprintln(tw, "\t\t\t")
	}
	if len(rep.Volumes) > 0 {
		fmt.Fprintln(tw, "LEFTOVER VOLUME\tKIND\tSIZE\tWHY")
		for _, v := range rep.Volumes {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", v.Name, v.Kind, size(v.SizeBytes), v.Why)
		}
		fmt.Fprintln(tw, "\t\t\t")
	}
	if len(rep.Images) > 0 {
		fmt.Fprintln(tw, "UNUSED IMAGE\tSIZE\tCREATED\tWHY")
		for _, i := range rep.Images {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", i.Ref, size(i.SizeBytes), i.CreatedAt.Local().Format("2006-01-02 15:04"), i.Why)
		}
	}
	tw.Flush()
	for _, n := range rep.Notes {
		fmt.Fprintln(e.stdout, "note:", n)
	}
}

func size(n int64) string {
	switch {
	case n < 0:
		return "?"
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// noRecords is the store of a data directory that has none.
type noRecords struct{}

func (noRecords) VMInstances(string) ([]store.VMInstance, error) { return nil, nil }
func (noRecords) VMImages(string) ([]store.VMImage, error)       { return nil, nil }
