package kubernetes_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"cubicle/backend/engine"
	"cubicle/backend/engine/enginetest"
	"cubicle/backend/engine/kubernetes"
	"cubicle/backend/engine/kubernetes/kubetest"
	"cubicle/backend/fault"
)

var _ enginetest.Containers = (*kubernetes.Client)(nil)

func TestConformance(t *testing.T) {
	cl := kubetest.Need(t)
	image := kubetest.PushBusybox(t, cl)
	enginetest.RunCluster(t, func(t *testing.T) enginetest.Containers { return kubetest.Connect(t, cl, kubernetes.Options{}) },
		enginetest.Cluster{Image: image, UID: kubernetes.DefaultRunAsUser})
}

// TestPodHardening checks the Pod a desktop becomes, as the cluster stored it, and what its
// process sees: no credentials to the cluster, no privileges, requests below limits. The
// namespace enforces the "restricted" Pod Security Standard, so admission checks it too.
func TestPodHardening(t *testing.T) {
	cl := kubetest.Need(t)
	image := kubetest.PushBusybox(t, cl)
	c := kubetest.Connect(t, cl, kubernetes.Options{RequestRatio: 0.5})
	ctx := kubetest.Context(t, 3*time.Minute)
	name := kubetest.Name(t, "hard")
	labels := kubetest.Labels(t, map[string]string{"io.cubicle.account": "an account id that is far too long for a kubernetes label value, with spaces"})
	vol := name + "-data"
	if err := c.EnsureVolume(ctx, vol, labels); err != nil {
		t.Fatal(err)
	}
	_, err := c.CreateContainer(ctx, engine.ContainerSpec{
		Name: name, Image: image, Labels: labels, Command: []string{"/bin/sh", "-c", "exec sleep 3600"},
		Volumes:     []engine.VolumeMount{{Name: vol, Target: "/data"}},
		Limits:      engine.Limits{MemoryBytes: 256 << 20, NanoCPUs: 500_000_000, ShmBytes: 16 << 20},
		StopTimeout: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.StartContainer(ctx, name); err != nil {
		t.Fatalf("StartContainer: %v", err)
	}
	p, err := cl.Clientset(t).CoreV1().Pods(cl.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ps, cs := p.Spec.SecurityContext, p.Spec.Containers[0].SecurityContext
	checks := []struct {
		what string
		ok   bool
	}{
		{"no service-account token", p.Spec.AutomountServiceAccountToken != nil && !*p.Spec.AutomountServiceAccountToken},
		{"run as non-root 1000", ps.RunAsNonRoot != nil && *ps.RunAsNonRoot && ps.RunAsUser != nil && *ps.RunAsUser == 1000},
		{"fsGroup 1000", ps.FSGroup != nil && *ps.FSGroup == 1000},
		{"RuntimeDefault seccomp", ps.SeccompProfile != nil && ps.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault},
		{"all capabilities dropped", cs.Capabilities != nil && len(cs.Capabilities.Drop) == 1 && cs.Capabilities.Drop[0] == "ALL" && len(cs.Capabilities.Add) == 0},
		{"no privilege escalation", cs.AllowPrivilegeEscalation != nil && !*cs.AllowPrivilegeEscalation},
		{"not privileged", cs.Privileged != nil && !*cs.Privileged},
		{"restart never", p.Spec.RestartPolicy == corev1.RestartPolicyNever},
		{"no host namespaces", !p.Spec.HostNetwork && !p.Spec.HostPID && !p.Spec.HostIPC},
		{"memory limit 256Mi, request 128Mi", p.Spec.Containers[0].Resources.Limits.Memory().Value() == 256<<20 &&
			p.Spec.Containers[0].Resources.Requests.Memory().Value() == 128<<20},
		{"cpu limit 500m, request 250m", p.Spec.Containers[0].Resources.Limits.Cpu().MilliValue() == 500 &&
			p.Spec.Containers[0].Resources.Requests.Cpu().MilliValue() == 250},
		{"owned by its record", len(p.OwnerReferences) == 1 && p.OwnerReferences[0].Kind == "ConfigMap" && p.OwnerReferences[0].Name == name},
	}
	for _, ch := range checks {
		if !ch.ok {
			t.Errorf("pod %s: want %s; spec %+v", name, ch.what, p.Spec)
		}
	}
	out := kubetest.Exec(t, c, name, "/bin/sh", "-c",
		"grep -E '^(CapEff|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status; id -u; id -G; ls /var/run/secrets 2>&1; touch /data/w && echo writable")
	for _, want := range []string{"CapEff:\t0000000000000000", "CapBnd:\t0000000000000000", "NoNewPrivs:\t1", "Seccomp:\t2", "1000\n", "writable"} {
		if !strings.Contains(out, want) {
			t.Errorf("inside the pod: no %q in:\n%s", want, out)
		}
	}
	if strings.Contains(out, "kubernetes.io") {
		t.Errorf("the pod sees service-account credentials:\n%s", out)
	}
	// Labels that Kubernetes cannot hold come back as given, and select.
	list, err := c.ListContainers(ctx, map[string]string{"io.cubicle.account": labels["io.cubicle.account"]})
	if err != nil || len(list) != 1 || list[0].Labels["io.cubicle.account"] != labels["io.cubicle.account"] {
		t.Fatalf("ListContainers by an over-long label = %+v, %v", list, err)
	}
	if vs, err := c.ListVolumes(ctx, map[string]string{"io.cubicle.account": labels["io.cubicle.account"]}); err != nil || len(vs) != 1 || vs[0] != vol {
		t.Fatalf("ListVolumes by an over-long label = %v, %v", vs, err)
	}
	if err := c.RemoveVolume(ctx, vol); !errors.Is(err, fault.ErrConflict) {
		t.Errorf("RemoveVolume(in use) = %v, want ErrConflict", err)
	}
	if err := c.RemoveContainer(ctx, name, true); err != nil {
		t.Fatal(err)
	}
	if err := c.RemoveVolume(ctx, vol); err != nil {
		t.Errorf("RemoveVolume: %v", err)
	}
}

// TestRefusals: what a cluster cannot do is refused before anything is created, with a
// message that says why; what it finds out later (an image it cannot pull, no room) fails
// the start with the class the caller acts on.
func TestRefusals(t *testing.T) {
	cl := kubetest.Need(t)
	image := kubetest.PushBusybox(t, cl)
	c := kubetest.Connect(t, cl, kubernetes.Options{})
	ctx := kubetest.Context(t, 5*time.Minute)
	labels := kubetest.Labels(t, nil)
	base := engine.ContainerSpec{Image: image, Labels: labels, Command: []string{"/bin/sh", "-c", "exec sleep 3600"}, StopTimeout: time.Second}
	created := map[string]bool{}
	for _, tt := range []struct {
		name   string
		change func(*engine.ContainerSpec)
	}{
		{"host mount", func(s *engine.ContainerSpec) {
			s.Mounts = []engine.Mount{{Source: t.TempDir(), Target: "/run/cubicle"}}
		}},
		{"root", func(s *engine.ContainerSpec) { s.User = "0" }},
		{"user by name", func(s *engine.ContainerSpec) { s.User = "cua" }},
		{"bad name", func(s *engine.ContainerSpec) { s.Name = "Not_A_DNS_Name" }},
		{"relative volume target", func(s *engine.ContainerSpec) { s.Volumes = []engine.VolumeMount{{Name: "v", Target: "data"}} }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			spec := base
			spec.Name = kubetest.Name(t, "refused")
			tt.change(&spec)
			_, err := c.CreateContainer(ctx, spec)
			if !errors.Is(err, fault.ErrInvalid) {
				created[spec.Name] = err == nil
				t.Fatalf("CreateContainer = %v, want ErrInvalid", err)
			}
			t.Logf("refused: %v", err)
		})
	}
	start := func(t *testing.T, spec engine.ContainerSpec) error {
		if _, err := c.CreateContainer(ctx, spec); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.RemoveContainer(kubetest.Context(t, time.Minute), spec.Name, true) })
		return c.StartContainer(ctx, spec.Name)
	}
	t.Run("missing image", func(t *testing.T) {
		spec := base
		spec.Name = kubetest.Name(t, "noimage")
		spec.Image = cl.Registry + "/cubicle-enginetest/none@sha256:" + strings.Repeat("0", 64)
		err := start(t, spec)
		if !errors.Is(err, fault.ErrUnavailable) || !strings.Contains(err.Error(), "cannot pull") {
			t.Fatalf("StartContainer(missing image) = %v, want ErrUnavailable saying it cannot pull", err)
		}
		t.Logf("refused: %v", err)
	})
	t.Run("no node fits", func(t *testing.T) {
		spec := base
		spec.Name = kubetest.Name(t, "huge")
		spec.Limits = engine.Limits{MemoryBytes: 64 << 40} // requests 16 TiB
		err := start(t, spec)
		if !errors.Is(err, fault.ErrConflict) || !strings.Contains(err.Error(), "no room") {
			t.Fatalf("StartContainer(16 TiB) = %v, want ErrConflict saying the cluster has no room", err)
		}
		t.Logf("refused: %v", err)
	})
	t.Run("exits at once", func(t *testing.T) {
		spec := base
		spec.Name = kubetest.Name(t, "exits")
		spec.Command = []string{"/bin/sh", "-c", "echo the last words; exit 7"}
		err := start(t, spec)
		if err == nil || !strings.Contains(err.Error(), "exit code 7") || !strings.Contains(err.Error(), "the last words") {
			t.Fatalf("StartContainer(exit 7) = %v, want the exit code and the output", err)
		}
	})
	for n, ok := range created {
		if ok {
			c.RemoveContainer(ctx, n, true)
		}
	}
}

// TestQuota: a namespace whose quota has no room for one more desktop refuses its start
// with fault.ErrConflict naming the quota. It runs in a namespace of its own (the shared one
// has no quota), bound to the same Role as shipped.
func TestQuota(t *testing.T) {
	cl := kubetest.Need(t)
	image := kubetest.PushBusybox(t, cl)
	admin := cl.AdminClientset(t)
	ctx := kubetest.Context(t, 5*time.Minute)
	ns := kubetest.Name(t, "quota")
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		admin.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
	})
	role, err := admin.RbacV1().Roles(cl.Namespace).Get(ctx, "cubicle-desktops", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the shipped Role in %s: %v", cl.Namespace, err)
	}
	if _, err := admin.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: role.Name}, Rules: role.Rules}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rb, err := admin.RbacV1().RoleBindings(cl.Namespace).Get(ctx, "cubicle-desktops", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: rb.Name},
		Subjects: rb.Subjects, RoleRef: rb.RoleRef}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().ResourceQuotas(ns).Create(ctx, &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "desktops"},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourceRequestsMemory: resource.MustParse("100Mi")}}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The quota controller fills in its status (hard, used) shortly after.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		q, err := admin.CoreV1().ResourceQuotas(ns).Get(ctx, "desktops", metav1.GetOptions{})
		if err == nil && len(q.Status.Hard) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the quota has no status after a minute: %v", err)
		}
	}
	c := kubetest.Connect(t, cl, kubernetes.Options{Namespace: ns})
	spec := engine.ContainerSpec{Name: kubetest.Name(t, "q"), Image: image, Labels: kubetest.Labels(t, nil),
		Command: []string{"/bin/sh", "-c", "exec sleep 3600"}, StopTimeout: time.Second,
		Limits: engine.Limits{MemoryBytes: 256 << 20}} // requests 64Mi: one fits, two do not
	first := spec
	if _, err := c.CreateContainer(ctx, first); err != nil {
		t.Fatal(err)
	}
	if err := c.StartContainer(ctx, first.Name); err != nil {
		t.Fatalf("StartContainer(first, fits the quota): %v", err)
	}
	second := spec
	second.Name = kubetest.Name(t, "q2")
	if _, err := c.CreateContainer(ctx, second); err != nil {
		t.Fatal(err)
	}
	err = c.StartContainer(ctx, second.Name)
	if !errors.Is(err, fault.ErrConflict) || !strings.Contains(err.Error(), `quota "desktops"`) {
		t.Fatalf("StartContainer(second, over the quota) = %v, want ErrConflict naming the quota", err)
	}
	t.Logf("refused: %v", err)
	st, err := c.InspectContainer(ctx, second.Name)
	if err != nil || st.Running {
		t.Fatalf("the refused container: %+v, %v", st, err)
	}
}

// TestUnreachable: an API server that does not answer is fault.ErrUnavailable, naming it.
func TestUnreachable(t *testing.T) {
	dir := t.TempDir()
	cfg := clientcmdConfig("https://127.0.0.1:1")
	path := dir + "/kubeconfig"
	if err := os.WriteFile(path, cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := kubernetes.Connect(ctx, kubernetes.Options{Kubeconfig: path, Namespace: "x"})
	if !errors.Is(err, fault.ErrUnavailable) || !strings.Contains(err.Error(), "https://127.0.0.1:1") {
		t.Fatalf("Connect(nothing listening) = %v, want ErrUnavailable naming the server", err)
	}
	for _, tt := range []struct {
		name string
		opts kubernetes.Options
		want error
	}{
		{"missing kubeconfig", kubernetes.Options{Kubeconfig: dir + "/none", Namespace: "x"}, fault.ErrInvalid},
		{"bad volume size", kubernetes.Options{Kubeconfig: path, Namespace: "x", VolumeSize: "lots"}, fault.ErrInvalid},
		{"bad request ratio", kubernetes.Options{Kubeconfig: path, Namespace: "x", RequestRatio: 2}, fault.ErrInvalid},
		{"root", kubernetes.Options{Kubeconfig: path, Namespace: "x", RunAsUser: -1}, fault.ErrInvalid},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := kubernetes.Connect(ctx, tt.opts); !errors.Is(err, tt.want) {
				t.Fatalf("Connect = %v, want %v", err, tt.want)
			}
		})
	}
}

func clientcmdConfig(server string) []byte {
	return []byte("apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: " + server +
		"\n    insecure-skip-tls-verify: true\nusers:\n- name: u\n  user: {token: t}\ncontexts:\n- name: d\n  context: {cluster: c, user: u}\ncurrent-context: d\n")
}
