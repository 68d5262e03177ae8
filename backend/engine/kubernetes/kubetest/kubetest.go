// Package kubetest gives tests the Kubernetes test cluster (scripts/k8s, brought up by
// scripts/test.sh): its settings from the CUBICLE_K8S_* environment (the cluster.env that
// up.sh writes), clients, unique names and labels whose objects are removed when the test
// ends, a busybox image pushed to the cluster's registry, and the API server's stop and
// start. Without the environment a test is skipped, or fails when CUBICLE_REQUIRE_ALL=1.
package kubetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"cubicle/backend/engine"
	"cubicle/backend/engine/enginetest"
	"cubicle/backend/engine/kubernetes"
	"cubicle/backend/engine/podman"
)

// Cluster is the test cluster as the environment describes it.
type Cluster struct {
	Kubeconfig      string // Cubicle's user, bound only by docs/kubernetes-rbac.yaml
	AdminKubeconfig string // the cluster admin (quota and namespace set-up of tests)
	Namespace       string
	Registry        string // host:port of the loopback registry the nodes pull from (plain HTTP)
	StorageClass    string
	Script          string // scripts/k8s/cluster.sh
}

// LabelRun marks every object a test creates (with its run id).
const LabelRun = enginetest.LabelRun

// Need returns the test cluster, or skips (fails under CUBICLE_REQUIRE_ALL=1) without one.
func Need(t testing.TB) *Cluster {
	t.Helper()
	c := &Cluster{
		Kubeconfig:      os.Getenv("CUBICLE_K8S_KUBECONFIG"),
		AdminKubeconfig: os.Getenv("CUBICLE_K8S_ADMIN_KUBECONFIG"),
		Namespace:       os.Getenv("CUBICLE_K8S_NAMESPACE"),
		Registry:        os.Getenv("CUBICLE_K8S_REGISTRY"),
		StorageClass:    os.Getenv("CUBICLE_K8S_STORAGE_CLASS"),
		Script:          os.Getenv("CUBICLE_K8S_CLUSTER"),
	}
	if c.Kubeconfig == "" || c.Namespace == "" || c.Registry == "" {
		enginetest.Require(t, "no Kubernetes test cluster: run scripts/k8s/cluster.sh build && scripts/k8s/cluster.sh up, "+
			"then export the variables of `scripts/k8s/cluster.sh env`")
	}
	return c
}

// Options fills in the cluster's kubeconfig, namespace and storage class where o has none.
func (c *Cluster) Options(o kubernetes.Options) kubernetes.Options {
	if o.Kubeconfig == "" {
		o.Kubeconfig = c.Kubeconfig
	}
	if o.Namespace == "" {
		o.Namespace = c.Namespace
	}
	if o.StorageClass == "" {
		o.StorageClass = c.StorageClass
	}
	return o
}

// Connect returns an adapter for the cluster (closed when the test ends).
func Connect(t testing.TB, c *Cluster, o kubernetes.Options) *kubernetes.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := kubernetes.Connect(ctx, c.Options(o))
	if err != nil {
		t.Fatalf("connect to the test cluster: %v", err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// Clientset is a client-go client as Cubicle's user.
func (c *Cluster) Clientset(t testing.TB) k8s.Interface { return clientset(t, c.Kubeconfig) }

// AdminClientset is a client-go client as the cluster admin.
func (c *Cluster) AdminClientset(t testing.TB) k8s.Interface {
	if c.AdminKubeconfig == "" {
		enginetest.Require(t, "no CUBICLE_K8S_ADMIN_KUBECONFIG")
	}
	return clientset(t, c.AdminKubeconfig)
}

func clientset(t testing.TB, path string) k8s.Interface {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := k8s.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// APIServer stops or starts the cluster's API server ("stop" | "start") with the cluster
// script; start waits until it is ready.
func (c *Cluster) APIServer(t testing.TB, action string) {
	t.Helper()
	if c.Script == "" {
		enginetest.Require(t, "no CUBICLE_K8S_CLUSTER (the cluster script)")
	}
	out, err := exec.Command(c.Script, "apiserver-"+action).CombinedOutput()
	if err != nil {
		t.Fatalf("%s apiserver-%s: %v\n%s", c.Script, action, err, out)
	}
}

// Context is a context cancelled after d or when the test ends.
func Context(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// RunID returns a fresh random id.
func RunID() string {
	b := make([]byte, 4)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// Name returns a unique object name ("cubicle-test-<what>-<random>").
func Name(t testing.TB, what string) string {
	return "cubicle-test-" + strings.ToLower(what) + "-" + RunID()
}

// Labels returns labels (extra plus a fresh run id) for a test's objects; the containers and
// claims carrying them are removed when the test ends.
func Labels(t testing.TB, extra map[string]string) map[string]string {
	run := RunID()
	l := map[string]string{enginetest.LabelTest: "kubernetes", LabelRun: run}
	for k, v := range extra {
		l[k] = v
	}
	c := Need(t)
	t.Cleanup(func() { c.Remove(t, map[string]string{LabelRun: run}) })
	return l
}

// Remove deletes the containers (records and Pods) and claims whose labels satisfy sel.
func (c *Cluster) Remove(t testing.TB, sel map[string]string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, err := kubernetes.Connect(ctx, c.Options(kubernetes.Options{}))
	if err != nil {
		t.Errorf("clean up: %v", err)
		return
	}
	cs, err := cl.ListContainers(ctx, sel)
	if err != nil {
		t.Errorf("clean up: %v", err)
	}
	for _, ct := range cs {
		if err := cl.RemoveContainer(ctx, ct.ID, true); err != nil {
			t.Errorf("clean up: %v", err)
		}
	}
	vs, err := cl.ListVolumes(ctx, sel)
	if err != nil {
		t.Errorf("clean up: %v", err)
	}
	for _, v := range vs {
		if err := cl.RemoveVolume(ctx, v); err != nil {
			t.Errorf("clean up: %v", err)
		}
	}
}

// PodmanSocket is the Podman service the tests build and push images with.
func PodmanSocket() string {
	if s := os.Getenv("CUBICLE_PODMAN_SOCKET"); s != "" {
		return s
	}
	return "unix:///run/podman/podman.sock"
}

// Podman connects to the Podman service (closed when the test ends).
func Podman(t testing.TB) *podman.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p, err := podman.Connect(ctx, PodmanSocket(), podman.Options{})
	if err != nil {
		enginetest.Require(t, "no Podman service to push test images with: "+err.Error())
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// PushBusybox imports the suite's busybox root file system with Podman, pushes it to the
// cluster's registry and returns it by digest (the local copy is removed).
func PushBusybox(t testing.TB, c *Cluster) string {
	t.Helper()
	p := Podman(t)
	rootfs, err := enginetest.BusyboxRootfs()
	if err != nil {
		enginetest.Require(t, "busybox rootfs: "+err.Error())
	}
	ctx := Context(t, 3*time.Minute)
	run := RunID()
	local := "localhost/cubicle-kubetest/busybox:" + run
	img, err := p.ImportImage(ctx, bytes.NewReader(rootfs), local, map[string]string{enginetest.LabelTest: "kubernetes", LabelRun: run})
	if err != nil {
		t.Fatalf("import busybox: %v", err)
	}
	repo := c.Registry + "/cubicle-kubetest/busybox"
	ref := repo + ":" + run
	if err := p.TagImage(ctx, img.ID, ref); err != nil {
		t.Fatalf("tag busybox: %v", err)
	}
	digest, err := p.PushImage(ctx, ref, engine.PullOptions{Insecure: true})
	if err != nil {
		t.Fatalf("push busybox to %s: %v", c.Registry, err)
	}
	for _, r := range []string{ref, local} {
		p.RemoveImage(ctx, r)
	}
	return repo + "@" + digest
}

// Exec runs a command in container name and returns its stdout (stderr appended).
func Exec(t testing.TB, c *kubernetes.Client, name string, cmd ...string) string {
	t.Helper()
	ctx := Context(t, time.Minute)
	st, err := c.ExecAttach(ctx, name, engine.ExecSpec{Command: cmd})
	if err != nil {
		t.Fatalf("exec %v in %s: %v", cmd, name, err)
	}
	defer st.Close()
	st.CloseWrite()
	out, err := io.ReadAll(st)
	if err != nil {
		t.Fatalf("exec %v in %s: %v", cmd, name, err)
	}
	return string(out) + st.Stderr()
}

// Pods lists the Pods in the cluster's namespace whose labels satisfy sel (a Kubernetes
// label selector), as Cubicle's user sees them.
func (c *Cluster) Pods(t testing.TB, sel string) []string {
	t.Helper()
	ctx := Context(t, 30*time.Second)
	list, err := c.Clientset(t).CoreV1().Pods(c.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		t.Fatalf("list pods: %v", err)
	}
	var out []string
	for _, p := range list.Items {
		out = append(out, fmt.Sprintf("%s(%s)", p.Name, p.Status.Phase))
	}
	return out
}
