package cli

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"cubicle/backend/engineconn"
	"cubicle/backend/fault"
	"cubicle/images"
)

// runImage is `cubicle image build KEY` and `cubicle image list`. Building here only makes
// the image (reused later by its content hash); Settings → Local VM → "Prepare selected
// image" also verifies it with a probe desktop and records it as ready.
func runImage(ctx context.Context, e *env, args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(e.stdout, `Usage: cubicle image build standard|cursor [--engine podman|docker] [--arch amd64|arm64] [--work-dir DIR]
       cubicle image list [--engine podman|docker] [--arch amd64|arm64]

build  builds the desktop image (or reuses it when its recipe and driver are unchanged)
list   shows each image key, the reference its current recipe builds and whether it exists

The bases are pinned by digest: CUBICLE_BASE_IMAGE/CUBICLE_BASE_DIGEST (standard, default
docker.io/library/debian:bookworm-slim) and CUBICLE_CURSOR_BASE/CUBICLE_CURSOR_DIGEST (cursor)
replace the built-in pins (sources saved in Settings → Local VM apply to the app's
preparations). CUBICLE_BASE_SOURCE=auto|pull|debootstrap chooses how the Debian base is had:
pulled, or built offline with debootstrap on a Linux host without a registry (auto: both).
`)
		if len(args) == 0 {
			return fault.Invalid("name a subcommand: build or list")
		}
		return nil
	}
	sub, rest := args[0], args[1:]
	fs := newFlags(e, "image "+sub, "cubicle image "+sub+" [flags]")
	eng := fs.String("engine", "", "podman or docker (default: $CUBICLE_ENGINE, else the one found)")
	workDir := fs.String("work-dir", filepath.Join(defaultDataDir(e.getenv), "images"), "scratch space for the offline base build")
	arch := fs.String("arch", "", "the standard image's architecture, amd64 or arm64 (default: the engine's own; another needs emulation)")
	var key images.Key
	switch sub {
	case "build":
		if len(rest) == 0 || strings.HasPrefix(rest[0], "-") {
			return fault.Invalid("name the image to build: standard or cursor")
		}
		k, err := images.ParseKey(rest[0])
		if err != nil {
			return err
		}
		key, rest = k, rest[1:]
	case "list":
	default:
		return fault.Invalid("unknown image subcommand %q: use build or list", sub)
	}
	if err := parse(fs, rest); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	ce, err := engineconn.ConnectEngine(cctx, *eng, log)
	cancel()
	if err != nil {
		return err
	}
	defer ce.Close()
	if *arch != "" && *arch != "amd64" && *arch != "arm64" {
		return fault.Invalid("--arch %q: use amd64 or arm64", *arch)
	}
	b, err := images.New(images.Config{Engine: ce.Client, Logger: log, WorkDir: *workDir, Arch: *arch})
	if err != nil {
		return err
	}
	if sub == "list" {
		list, err := b.List(ctx)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "KEY\tPLATFORM\tPRESENT\tREFERENCE\tSIZE\tCREATED")
		for _, s := range list {
			created, size := "", ""
			if s.Prepared {
				created, size = s.Created.Local().Format(time.DateTime), fmt.Sprintf("%.0f MB", float64(s.Size)/1e6)
			}
			fmt.Fprintf(tw, "%s\tlinux/%s\t%v\t%s\t%s\t%s\n", s.Key, s.Arch, s.Prepared, s.Ref, size, created)
		}
		return tw.Flush()
	}
	start := time.Now()
	last := ""
	res, err := b.Ensure(ctx, key, func(p images.Progress) {
		if p.Step != last {
			last = p.Step
			if p.Percent >= 0 {
				fmt.Fprintf(e.stdout, "[%3.0f%%] %s\n", p.Percent, p.Step)
			} else {
				fmt.Fprintf(e.stdout, "[    ] %s\n", p.Step)
			}
		}
		if p.Line != "" {
			fmt.Fprintf(e.stdout, "       %s\n", strings.TrimRight(p.Line, "\n"))
		}
	})
	if err != nil {
		return err
	}
	verb := "built"
	if res.Reused {
		verb = "reused"
	}
	fmt.Fprintf(e.stdout, "%s %s (%s) in %s\n", verb, res.Ref, key, time.Since(start).Round(time.Millisecond))
	return nil
}
