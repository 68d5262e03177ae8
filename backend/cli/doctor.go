package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"

	"cubicle/backend/doctor"
	"cubicle/backend/engineconn"
	"cubicle/backend/fault"
	"cubicle/backend/link"
)

func checkers(dataDir string, getenv func(string) string) []doctor.Checker {
	return []doctor.Checker{
		doctor.Engine(getenv("CUBICLE_ENGINE"), getenv, engineconn.DiscoverEngines),
		doctor.GuestLink(getenv(link.EnvVar), getenv, engineconn.DiscoverEngines),
		doctor.Display(getenv),
		doctor.DataDir(dataDir),
		doctor.Version(Version),
	}
}

func runDoctor(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "doctor", "cubicle doctor [--data-dir DIR] [--json] [--check-store] [--clean] [--remove-volume NAME]...")
	dataDir := fs.String("data-dir", defaultDataDir(e.getenv), "the data directory to check (env CUBICLE_DATA_DIR)")
	asJSON := fs.Bool("json", false, `print {"engines": […], "checks": […], "ok": bool} instead of tables`)
	storeOnly := fs.Bool("check-store", false, "only check the data file fully, every page and record (stop Cubicle first)")
	clean := fs.Bool("clean", false, "remove the leftover desktop containers and unused desktop image tags listed (never volumes)")
	var volumes names
	fs.Var(&volumes, "remove-volume", "remove this leftover volume (someone's work files; repeat for more)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *asJSON && (*clean || len(volumes) > 0) {
		return fault.Invalid("--clean and --remove-volume print what they removed: use them without --json")
	}
	if *storeOnly {
		return checkStore(ctx, e, *dataDir)
	}
	r := doctor.Run(ctx, checkers(*dataDir, e.getenv)...)
	if *asJSON {
		out := struct {
			doctor.Report
			OK bool `json:"ok"`
		}{r, r.OK()}
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			return err
		}
	} else {
		tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "CHECK\tSTATUS\tDETAIL\tFIX")
		for _, c := range r.Checks {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", c.Name, strings.ToUpper(string(c.Status)), c.Detail, c.Fix)
		}
		tw.Flush()
		fmt.Fprintln(e.stdout)
		tw = tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ENGINE\tSOURCE\tADDRESS\tREACHABLE\tVERSION\tWHERE")
		for _, ep := range r.Engines {
			where := "this machine"
			switch {
			case ep.Remote:
				where = "remote"
			case ep.VM:
				where = "VM"
			}
			state := "yes"
			if !ep.Reachable {
				state = "no: " + ep.Err
			}
			src := ep.Source
			if ep.Name != "" {
				src += " (" + ep.Name + ")"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", ep.Kind, src, ep.Socket, state, ep.Version, where)
		}
		tw.Flush()
	}
	if !*asJSON {
		// The leftovers on the engine (and, on request, their clean-up) after the checks.
		if err := leftovers(ctx, e, *dataDir, e.getenv("CUBICLE_ENGINE"), *clean, volumes); err != nil {
			return err
		}
	}
	if !r.OK() {
		where := "see FIX above"
		if *asJSON {
			where = `see the checks' "fix"`
		}
		fmt.Fprintf(e.stderr, "cubicle doctor: something required is missing (%s)\n", where)
		return exitError{code: 1}
	}
	return nil
}
