package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"cubicle/backend/engine"
	"cubicle/backend/fault"
	"cubicle/backend/guest"
	"cubicle/backend/link"
	"cubicle/backend/store"
	"cubicle/backend/vm"
)

// The Kubernetes rows put the same desktop on a cluster (backend/engine/kubernetes), in the
// same run: the peers image is pushed to the cluster's registry and pulled by digest, and a
// second desktop manager of the product runs its desktops as Pods. k8s_cold_start is the
// product's create there (claims, Pod scheduled and started, driver handshake over the
// exec subresource) → first drawn screenshot, next to this run's Podman cold start;
// k8s_exec is the driver's exec of `true` over the Kubernetes exec link, next to a new exec
// session per command through the API server (what `kubectl exec POD -- true` does). Without
// a cluster both rows are kept with no samples and say why ("—").

// Kube is the cluster a run measures the Kubernetes rows on.
type Kube struct {
	// Engine runs the desktops (a *kubernetes.Client).
	Engine vm.Engine
	// Registry is where the peers image is pushed (host[:port][/path]) for the nodes to pull;
	// Insecure pushes over plain HTTP.
	Registry string
	Insecure bool
}

// Pusher tags and pushes an image of the local engine (for the Kubernetes rows).
type Pusher interface {
	TagImage(ctx context.Context, id, ref string) error
	PushImage(ctx context.Context, ref string, opts engine.PullOptions) (digest string, err error)
}

// Row ids of the Kubernetes rows.
const (
	RowK8sColdStart = "k8s_cold_start"
	RowK8sExec      = "k8s_exec"
)

// kube measures the Kubernetes rows, or records why they were not measured.
func (r *runner) kube(ctx context.Context, _ *desktop) error {
	k := r.cfg.Kube
	if k == nil {
		why := r.cfg.KubeMissing
		if why == "" {
			why = "no Kubernetes cluster configured (--kubeconfig, --namespace, --registry)"
		}
		r.notMeasured(why)
		return nil
	}
	pusher, ok := r.cfg.Engine.(Pusher)
	if !ok {
		r.notMeasured("the local engine cannot push images to the cluster's registry")
		return nil
	}
	peers := r.rep.Images.Peers
	tag := peers[strings.LastIndex(peers, ":")+1:]
	repo := strings.TrimSuffix(k.Registry, "/") + "/cubicle-bench-peers"
	r.progress("pushing %s to %s for the cluster", peers, k.Registry)
	if err := pusher.TagImage(ctx, r.rep.Images.PeersID, repo+":"+tag); err != nil {
		return fmt.Errorf("tag the peers image for the cluster: %w", err)
	}
	digest, err := pusher.PushImage(ctx, repo+":"+tag, engine.PullOptions{Insecure: k.Insecure})
	if err != nil {
		return fmt.Errorf("push the peers image to %s: %w", k.Registry, err)
	}
	ref := repo + "@" + digest

	st, err := store.Open(filepath.Join(r.runRoot, "k8s.db"), store.Options{Logger: r.log, KeepBackups: -1})
	if err != nil {
		return err
	}
	node := "bench-k8s-" + r.id
	if err := st.CreateAccount(store.Account{ID: benchAccount, Username: benchAccount, Role: store.RoleAdmin}); err != nil {
		st.Close()
		return err
	}
	if err := st.PutVMImage(store.VMImage{NodeID: node, Key: "standard", Ref: ref, PreparedAt: time.Now().UTC()}); err != nil {
		st.Close()
		return err
	}
	m, err := vm.New(vm.Config{Store: st, Engine: k.Engine, NodeID: node, DataDir: filepath.Join(r.runRoot, "k8s"), Logger: r.log,
		ReadyTimeout: 5 * time.Minute, ExtraLabels: map[string]string{LabelRun: r.id},
		Link: link.Config{Choice: link.Choice{Mode: link.Auto, Primary: link.NameExec, Reason: "a Kubernetes cluster"}}})
	if err != nil {
		st.Close()
		return err
	}
	f := &fleet{st: st, m: m}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		removeFleetDesktops(ctx, f)
		m.Close()
		st.Close()
		removeKubeVolumes(ctx, k.Engine, r.id)
	}()
	if err := m.Start(ctx); err != nil {
		return err
	}
	if _, err := m.SetIdlePolicy(ctx, "bench", 0, nil); err != nil {
		return err
	}
	if _, err := m.SetPolicy(ctx, "per-agent", 4); err != nil {
		return err
	}

	var cold []float64
	var last *desktop
	for i := range max(r.cfg.Counts.ColdStarts, 1) {
		r.progress("measuring a desktop on the cluster %d/%d: cold start", i+1, r.cfg.Counts.ColdStarts)
		d := &desktop{}
		err := timed(&cold, func() error {
			if err := kubeCreate(ctx, f, d); err != nil {
				return err
			}
			return r.firstRealScreenshot(ctx, d)
		})
		if err != nil {
			return err
		}
		last = d
	}
	var podman []float64
	if row := r.rep.Row("cold_start"); row != nil {
		podman = row.Ours.Samples
	}
	r.add(Row{ID: RowK8sColdStart, Title: "desktop cold start on Kubernetes: create → first drawn screenshot", Unit: UnitMS, Better: "lower",
		Ours: Side{Method: "the product's create with the kubernetes engine: claims, Pod (image by digest from the registry, " +
			"cached by the node after the first pull) scheduled and started, driver handshake over the exec subresource; then PNG " +
			"screenshots until one has ≥16 colours", Samples: cold},
		PeerName: "podman (same run)", Peer: &Side{Method: "this run's cold_start row: the same create with Podman", Samples: podman},
		Note: "ours/peer is the cost of the cluster next to a local engine, not a competitor"})

	// Exec: a round trip over the desktop's Kubernetes exec link, against a new exec session
	// per command (kubectl exec's way).
	execer, ok := k.Engine.(interface {
		ExecAttach(ctx context.Context, id string, spec engine.ExecSpec) (*engine.ExecStream, error)
	})
	if !ok {
		return errors.New("the cluster's engine has no exec")
	}
	viaLink := func() error {
		res, err := last.client.Exec(ctx, guest.ExecRequest{Command: []string{"true"}})
		if err == nil && res.ExitCode != 0 {
			err = fault.Unavailable("exec true: exit %d", res.ExitCode)
		}
		return err
	}
	oneShot := func() error {
		s, err := execer.ExecAttach(ctx, last.id, engine.ExecSpec{Command: []string{"true"}})
		if err != nil {
			return err
		}
		defer s.Close()
		s.CloseWrite()
		_, err = io.Copy(io.Discard, s)
		return err
	}
	for _, fn := range []func() error{viaLink, oneShot} { // warm-up
		if err := fn(); err != nil {
			return err
		}
	}
	var ours, peer []float64
	if err := interleave(ctx, r.cfg.Counts.Fast, r.cfg.Counts.Peer,
		func(int) error { return timed(&ours, viaLink) }, func(int) error { return timed(&peer, oneShot) }); err != nil {
		return err
	}
	r.add(Row{ID: RowK8sExec, Title: "exec round trip (true) over the Kubernetes exec link", Unit: UnitMS, Better: "lower",
		Ours: Side{Method: "driver exec over the desktop's link: one long-lived exec session through the API server and kubelet " +
			"(cubicle-guest --relay, its stdin/stdout carrying the protocol)", Samples: ours},
		PeerName: "kubectl-style exec", Peer: &Side{Method: "a new exec session per command through the API server (SPDY), " +
			"as `kubectl exec POD -- true` makes", Samples: peer}})
	return nil
}

// notMeasured keeps the Kubernetes rows, without samples, saying why.
func (r *runner) notMeasured(why string) {
	r.progress("Kubernetes rows not measured: %s", why)
	for _, row := range []Row{
		{ID: RowK8sColdStart, Title: "desktop cold start on Kubernetes: create → first drawn screenshot"},
		{ID: RowK8sExec, Title: "exec round trip (true) over the Kubernetes exec link"},
	} {
		row.Unit, row.Better, row.Note, row.Skipped = UnitMS, "lower", "not measured: "+why, true
		r.add(row)
	}
}

// kubeCreate is the product's create of a new agent's desktop in fleet f, with its link.
func kubeCreate(ctx context.Context, f *fleet, d *desktop) error {
	f.n++
	d.agent = fmt.Sprintf("bench-k8s-%d", f.n)
	if err := f.st.CreateAgent(store.Agent{ID: d.agent, AccountID: benchAccount, Name: d.agent, Computer: "vm",
		CreatedAt: time.Now().UTC()}); err != nil {
		return err
	}
	v, err := f.m.Act(ctx, benchAccount, d.agent, vm.ActionCreate)
	if err != nil {
		return fmt.Errorf("bench: create a desktop on the cluster: %w", err)
	}
	d.instance, d.name, d.id = v.Desktop.ID, v.Desktop.Container, v.Desktop.Container
	c, err := f.m.Link(ctx, d.instance)
	if err != nil {
		return fmt.Errorf("bench: desktop %s on the cluster: %w", d.name, err)
	}
	d.client = c
	return nil
}

// removeFleetDesktops removes every desktop of fleet f (the product's remove).
func removeFleetDesktops(ctx context.Context, f *fleet) {
	for i := 1; i <= f.n; i++ {
		f.m.Act(ctx, benchAccount, fmt.Sprintf("bench-k8s-%d", i), vm.ActionRemove)
	}
}

// removeKubeVolumes removes the claims of run id from the cluster.
func removeKubeVolumes(ctx context.Context, e vm.Engine, id string) {
	v, ok := e.(interface {
		ListVolumes(ctx context.Context, labels map[string]string) ([]string, error)
		RemoveVolume(ctx context.Context, name string) error
	})
	if !ok {
		return
	}
	names, _ := v.ListVolumes(ctx, map[string]string{LabelRun: id})
	for _, n := range names {
		v.RemoveVolume(ctx, n)
	}
}
