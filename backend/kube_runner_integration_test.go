package backend

import (
	"bytes"
	"context"
	"errors"
	"image/png"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"cubicle/backend/deskegress"
	"cubicle/backend/engine/kubernetes"
	"cubicle/backend/engine/kubernetes/kubetest"
	"cubicle/backend/fault"
	"cubicle/backend/guest"
	"cubicle/backend/nodes"
	"cubicle/backend/store"
	"cubicle/backend/vm"
	"cubicle/internal/runnertest"
	"cubicle/internal/testenv"
	"cubicle/runner"
)

// TestKubernetesRunner runs a runner whose desktops are Pods of the test cluster (scripts/k8s),
// as `cubicle runner --engine kubernetes --kubeconfig … --namespace … --registry …` does: a
// real server (no engine of its own) and an in-process runner with the runner's engine
// discovery (ConnectRunnerEngine) connected to it over HTTP. The image is prepared through the
// server on the runner (built with the runner machine's Podman, pushed to the cluster's
// registry), an agent placed on the runner gets its desktop as a Pod running that digest, a
// screenshot comes through the runner's link (the exec link on the runner's side), and stop
// and remove delete the Pod; nothing of the runner's is left on the cluster.
func TestKubernetesRunner(t *testing.T) {
	cl := kubetest.Need(t)
	if testing.Short() {
		t.Skip("real cluster test; run without -short")
	}
	began := time.Now()
	dir := t.TempDir()
	log := testenv.Logger(t, slog.LevelInfo)
	b, err := New(Config{DataDir: dir + "/server", Engine: "none", AllowedHosts: []string{"127.0.0.1"}, Logger: log.With("side", "server")})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	t.Cleanup(func() { b.Close() })
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.WaitEngine(ctx); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(b.API.Handler())
	t.Cleanup(srv.Close)

	created, err := b.Nodes.Create("cluster runner", false, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	node := created.ID
	sel := map[string]string{vm.LabelNode: node} // a fresh random id: only this test's objects
	t.Cleanup(func() { cl.Remove(t, sel) })

	kube := store.EngineSettings{Kubeconfig: cl.Kubeconfig, Namespace: cl.Namespace, StorageClass: cl.StorageClass,
		Registry: cl.Registry, RegistryInsecure: true}
	r := runnertest.Start(t, runner.Config{Server: srv.URL, Token: created.Token, DataDir: dir + "/runner", Engine: "kubernetes",
		Kubernetes: kube, ConnectEngine: ConnectRunnerEngine, NoHostTools: true, MaxBackoff: time.Second,
		Version: "9.9.9", Logger: log.With("side", "runner")})
	waitFor(t, "the runner to connect", time.Minute, func() bool { return b.Nodes.Connected(node) })
	if g := r.VMs().GuestLink(); g.Primary != "exec" || g.Mount {
		t.Fatalf("the runner's guest link on a cluster = %+v, want exec without a mount", g)
	}
	var v nodes.View
	list, err := b.Nodes.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range list {
		if n.ID == node {
			v = n
		}
	}
	if v.Engine != "kubernetes" || v.EngineError != "" {
		t.Fatalf("the runner's engine as the server sees it: %q (error %q), want kubernetes", v.Engine, v.EngineError)
	}
	t.Logf("runner connected with engine %s after %v", v.Engine, time.Since(began).Round(time.Millisecond))

	vms, err := b.fleet.Node(node)
	if err != nil {
		t.Fatal(err)
	}
	var ref string
	t.Run("prepare on the runner pushes to the registry", func(t *testing.T) {
		start := time.Now()
		pctx, pcancel := context.WithTimeout(ctx, 30*time.Minute)
		defer pcancel()
		img, err := vms.Prepare(pctx, "standard")
		if err != nil {
			t.Fatalf("prepare: %v", err)
		}
		if !strings.HasPrefix(img.Ref, cl.Registry+"/cubicle-desktop@sha256:") {
			t.Fatalf("prepared ref %q is not the registry's image by digest", img.Ref)
		}
		ref = img.Ref
		t.Logf("prepared %s in %v", img.Ref, time.Since(start).Round(time.Millisecond))
	})
	if ref == "" {
		t.FailNow()
	}

	admin, err := b.Auth.Admin()
	if err != nil {
		t.Fatal(err)
	}
	ag, err := b.Profiles.Create(admin.ID, "Rue")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := b.fleet.Place(ctx, admin.ID, ag.ID, node); err != nil || got != node {
		t.Fatalf("place the agent on the runner: %q, %v", got, err)
	}
	act := func(t *testing.T, action string) vm.InstanceView {
		t.Helper()
		actx, acancel := context.WithTimeout(ctx, 5*time.Minute)
		defer acancel()
		m, err := b.fleet.AgentNode(ag.ID)
		if err != nil {
			t.Fatal(err)
		}
		if m.NodeID() != node {
			t.Fatalf("the agent's calls go to node %s, want the runner %s", m.NodeID(), node)
		}
		av, err := m.Act(actx, admin.ID, ag.ID, action)
		if err != nil {
			t.Fatalf("%s: %v", action, err)
		}
		return av.Desktop
	}
	pods := cl.Clientset(t).CoreV1().Pods(cl.Namespace)

	// The runner's desktops take the node's egress policy as their Pods' NetworkPolicies: a
	// closed policy set now must be in place when the Pod is made (checked below).
	if _, err := b.Egress.SetNodeEgress(ctx, admin.ID, node, store.EgressPolicy{Mode: deskegress.Closed}); err != nil {
		t.Fatalf("a closed egress policy on the cluster runner: %v", err)
	}

	var desk vm.InstanceView
	t.Run("the desktop is a pod of the cluster", func(t *testing.T) {
		start := time.Now()
		desk = act(t, vm.ActionCreate)
		if desk.State != vm.StateRunning || desk.NodeID != node || desk.Container == "" {
			t.Fatalf("desktop after create: %+v", desk)
		}
		t.Logf("created and running in %v", time.Since(start).Round(time.Millisecond))
		p, err := pods.Get(ctx, desk.Container, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("the desktop's pod: %v", err)
		}
		if p.Status.Phase != corev1.PodRunning {
			t.Errorf("pod phase %s, want Running", p.Status.Phase)
		}
		if c := p.Spec.Containers[0]; c.Image != ref {
			t.Errorf("pod image %q, want the prepared digest %q", c.Image, ref)
		}
		for _, v := range p.Spec.Volumes {
			if v.HostPath != nil {
				t.Errorf("the desktop's pod mounts a host path: %+v", v)
			}
		}
	})
	if desk.Container == "" {
		t.FailNow()
	}

	t.Run("a screenshot through the runner's link", func(t *testing.T) {
		lctx, lcancel := context.WithTimeout(ctx, 2*time.Minute)
		defer lcancel()
		g, err := vms.Link(lctx, desk.ID)
		if err != nil {
			t.Fatalf("the driver link through the runner: %v", err)
		}
		if _, remote := vms.(*nodes.Remote); !remote {
			t.Fatalf("node %s is reached through %T, want the runner's link", node, vms)
		}
		start := time.Now()
		f, err := g.Screenshot(lctx, guest.ScreenshotOptions{Format: "png"})
		if err != nil {
			t.Fatalf("screenshot: %v", err)
		}
		img, err := png.Decode(bytes.NewReader(f.Data))
		if err != nil {
			t.Fatalf("the screenshot is no PNG: %v", err)
		}
		if sz := img.Bounds().Size(); sz.X != 1280 || sz.Y != 800 {
			t.Errorf("screenshot %v, want 1280x800", sz)
		}
		t.Logf("screenshot %v (%d bytes) in %v", img.Bounds().Size(), len(f.Data), time.Since(start).Round(time.Millisecond))
		r, err := g.Exec(lctx, guest.ExecRequest{Shell: "id -u"})
		if err != nil || r.ExitCode != 0 || strings.TrimSpace(string(r.Stdout)) != "1000" {
			t.Errorf("exec in the pod through the runner: %+v, %v", r, err)
		}
	})

	// issue 26: a runner whose desktops are Pods enforces egress policies as the server's own
	// cluster does — a NetworkPolicy per desktop, written by the runner (the server never
	// touches the runner's cluster), in place before the Pod started, replaced on the running
	// desktop, removed for open; a wildcard is refused by the runner and nothing is saved.
	t.Run("the egress policy is the pod's NetworkPolicy", func(t *testing.T) {
		nps := cl.Clientset(t).NetworkingV1().NetworkPolicies(cl.Namespace)
		np, err := nps.Get(ctx, desk.Container, metav1.GetOptions{})
		if err != nil || len(np.Spec.Egress) != 0 || np.Spec.PodSelector.MatchLabels["cubicle.io/container"] != desk.Container {
			t.Fatalf("closed: the desktop's NetworkPolicy %+v, %v", np, err)
		}
		p, err := pods.Get(ctx, desk.Container, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !np.CreationTimestamp.Before(&p.CreationTimestamp) && !np.CreationTimestamp.Equal(&p.CreationTimestamp) {
			t.Errorf("the NetworkPolicy (%v) came after the Pod (%v)", np.CreationTimestamp, p.CreationTimestamp)
		}
		v, err := b.Egress.SetNodeEgress(ctx, admin.ID, node, store.EgressPolicy{Mode: deskegress.AllowList, Allow: []string{"10.1.2.0/24"}})
		if err != nil || !strings.Contains(v.Enforcement, "NetworkPolicy") {
			t.Fatalf("an allow-list on the cluster runner: %+v, %v", v, err)
		}
		np, err = nps.Get(ctx, desk.Container, metav1.GetOptions{})
		if err != nil || len(np.Spec.Egress) != 1 || np.Spec.Egress[0].To[0].IPBlock.CIDR != "10.1.2.0/24" {
			t.Fatalf("allow-list on the running desktop: %+v, %v", np, err)
		}
		_, err = b.Egress.SetNodeEgress(ctx, admin.ID, node, store.EgressPolicy{Mode: deskegress.AllowList, Allow: []string{"*.example.com"}})
		if !errors.Is(err, fault.ErrInvalid) || !strings.Contains(err.Error(), "list the names") {
			t.Fatalf("a wildcard on the cluster runner: %v, want invalid saying to list the names", err)
		}
		if ns, _ := b.Store.NodeSettings(node); len(ns.Egress.Allow) != 1 || ns.Egress.Allow[0] != "10.1.2.0/24" {
			t.Fatalf("the refused policy changed the saved one: %+v", ns.Egress)
		}
		if _, err := b.Egress.SetNodeEgress(ctx, admin.ID, node, store.EgressPolicy{Mode: deskegress.Open}); err != nil {
			t.Fatal(err)
		}
		if _, err := nps.Get(ctx, desk.Container, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("open left the NetworkPolicy: %v", err)
		}
		if st, err := pods.Get(ctx, desk.Container, metav1.GetOptions{}); err != nil || st.Status.Phase != corev1.PodRunning {
			t.Errorf("the desktop's pod after the policy changes: %v", err)
		}
	})

	// Pod desktops are recorded on the node that runs Cubicle's side of the link: this runner
	// (docs/recording.md "Runners and Kubernetes"), not the server.
	t.Run("the runner records the pod desktop", func(t *testing.T) {
		var id string
		recs := b.recs // the API's
		waitFor(t, "the runner's recording of the pod desktop", 2*time.Minute, func() bool {
			l, err := recs.List(ctx, admin.ID, ag.ID)
			if err != nil {
				return false
			}
			for _, i := range l {
				if i.DesktopID == desk.ID && i.Runner == node {
					id = i.ID
					_, err := os.Stat(filepath.Join(dir, "runner", "recordings", i.ID, "seg-000001"))
					return err == nil
				}
			}
			return false
		})
		if n := b.Screens.RegionViewers(desk.ID); n != 0 || b.Recordings.Recording(desk.ID) != "" {
			t.Errorf("the server records the runner's pod desktop too (%d region viewers)", n)
		}
		t.Logf("recording %s on the runner's disk", id)
	})

	t.Run("stop and remove delete the pod", func(t *testing.T) {
		if v := act(t, vm.ActionStop); v.State != vm.StateStopped {
			t.Fatalf("after stop: %s", v.State)
		}
		if _, err := pods.Get(ctx, desk.Container, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("the pod after stop: %v, want not found", err)
		}
		if v := act(t, vm.ActionRemove); v.State != vm.StateAbsent {
			t.Fatalf("after remove: %s", v.State)
		}
		kc := kubetest.Connect(t, cl, kubernetes.Options{})
		cs, err := kc.ListContainers(ctx, sel)
		if err != nil || len(cs) != 0 {
			t.Fatalf("the runner's desktops on the cluster after remove: %+v, %v", cs, err)
		}
	})

	t.Run("no leftovers", func(t *testing.T) {
		r.Stop()
		cl.Remove(t, sel) // the claims a removed desktop keeps (its workspace) until its data is deleted
		kc := kubetest.Connect(t, cl, kubernetes.Options{})
		cs, err := kc.ListContainers(ctx, sel)
		if err != nil || len(cs) != 0 {
			t.Fatalf("containers left: %+v, %v", cs, err)
		}
		vs, err := kc.ListVolumes(ctx, sel)
		if err != nil || len(vs) != 0 {
			t.Fatalf("claims left: %v, %v", vs, err)
		}
		waitFor(t, "the desktop's pod to be gone", time.Minute, func() bool {
			_, err := pods.Get(ctx, desk.Container, metav1.GetOptions{})
			return apierrors.IsNotFound(err)
		})
	})
	t.Logf("TestKubernetesRunner took %v", time.Since(began).Round(time.Millisecond))
}
