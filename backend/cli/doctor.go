package cli

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"

	"cubicle/backend/doctor"
	"cubicle/backend/link"
)

func checkers(dataDir string, getenv func(string) string) []doctor.Checker {
	return []doctor.Checker{
		doctor.Engine(getenv("CUBICLE_ENGINE"), getenv),
		doctor.GuestLink(getenv(link.EnvVar), getenv),
		doctor.Display(getenv),
		doctor.DataDir(dataDir),
		doctor.Version(Version),
	}
}

func runDoctor(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "doctor", "cubicle doctor [--data-dir DIR] [--check-store] [--clean] [--remove-volume NAME]...")
	dataDir := fs.String("data-dir", defaultDataDir(e.getenv), "the data directory to check (env CUBICLE_DATA_DIR)")
	storeOnly := fs.Bool("check-store", false, "only check the data file fully, every page and record (stop Cubicle first)")
	clean := fs.Bool("clean", false, "remove the leftover desktop containers and unused desktop image tags listed (never volumes)")
	var volumes names
	fs.Var(&volumes, "remove-volume", "remove this leftover volume (someone's work files; repeat for more)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *storeOnly {
		return checkStore(e, *dataDir)
	}
	r := doctor.Run(ctx, checkers(*dataDir, e.getenv)...)
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CHECK\tSTATUS\tDETAIL\tFIX")
	for _, c := range r.Checks {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", c.Name, strings.ToUpper(string(c.Status)), c.Detail, c.Fix)
	}
	tw.Flush()
	if err := leftovers(ctx, e, *dataDir, e.getenv("CUBICLE_ENGINE"), *clean, volumes); err != nil {
		return err
	}
	if !r.OK() {
		fmt.Fprintln(e.stderr, "cubicle doctor: something required is missing (see FIX above)")
		return exitError{code: 1}
	}
	return nil
}
