// Command provisioner is the test cluster's storage: a minimal dynamic provisioner of local
// PersistentVolumes on a single node. For every claim of its StorageClass it makes a
// directory under --dir and a `local` PersistentVolume pinned to --node, bound to the claim;
// when a claim is deleted it deletes the volume and its directory (reclaim policy Delete).
//
// It exists because the cluster's built-in hostPath provisioner makes root-owned 0750
// directories and hostPath volumes ignore a pod's fsGroup, so a non-root desktop could not
// write its workspace; local volumes get the pod's fsGroup from the kubelet. Real clusters
// have a provisioner of their own (any StorageClass with ReadWriteOnce volumes works).
//
// It runs until SIGTERM or SIGINT; up.sh starts it and down.sh stops it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// Name is the provisioner name a StorageClass names to use this provisioner.
const Name = "cubicle.test/local"

// Annotations the Kubernetes volume controller and provisioners agree on.
const (
	annProvisioner   = "volume.kubernetes.io/storage-provisioner"
	annProvisionerV1 = "volume.beta.kubernetes.io/storage-provisioner"
	annProvisionedBy = "pv.kubernetes.io/provisioned-by"
)

type provisioner struct {
	cs    kubernetes.Interface
	dir   string
	node  string
	class string
	log   *slog.Logger
}

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of a cluster admin")
	dir := flag.String("dir", "", "directory that holds the volumes")
	node := flag.String("node", "localhost", "the node the volumes live on")
	class := flag.String("class", "cubicle-local", "the StorageClass served")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if *kubeconfig == "" || *dir == "" {
		fmt.Fprintln(os.Stderr, "usage: provisioner --kubeconfig FILE --dir DIR [--node NAME] [--class NAME]")
		os.Exit(2)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		log.Error("kubeconfig", "err", err)
		os.Exit(1)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		log.Error("client", "err", err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	p := &provisioner{cs: cs, dir: *dir, node: *node, class: *class, log: log}
	for ctx.Err() == nil {
		if err := p.run(ctx); err != nil && ctx.Err() == nil {
			log.Warn("watch ended; again in 1 s", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
}

// run lists claims and volumes, handles each, then follows both watches until one ends.
func (p *provisioner) run(ctx context.Context) error {
	pvcs, err := p.cs.CoreV1().PersistentVolumeClaims("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for i := range pvcs.Items {
		p.claim(ctx, &pvcs.Items[i])
	}
	pvs, err := p.cs.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for i := range pvs.Items {
		p.volume(ctx, &pvs.Items[i])
	}
	wc, err := p.cs.CoreV1().PersistentVolumeClaims("").Watch(ctx, metav1.ListOptions{ResourceVersion: pvcs.ResourceVersion})
	if err != nil {
		return err
	}
	defer wc.Stop()
	wv, err := p.cs.CoreV1().PersistentVolumes().Watch(ctx, metav1.ListOptions{ResourceVersion: pvs.ResourceVersion})
	if err != nil {
		return err
	}
	defer wv.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-wc.ResultChan():
			if !ok {
				return errors.New("claim watch closed")
			}
			if c, ok := ev.Object.(*corev1.PersistentVolumeClaim); ok && ev.Type != watch.Deleted {
				p.claim(ctx, c)
			}
		case ev, ok := <-wv.ResultChan():
			if !ok {
				return errors.New("volume watch closed")
			}
			if v, ok := ev.Object.(*corev1.PersistentVolume); ok && ev.Type != watch.Deleted {
				p.volume(ctx, v)
			}
		}
	}
}

// claim provisions a volume for a pending claim of our class that the volume controller
// handed to us.
func (p *provisioner) claim(ctx context.Context, c *corev1.PersistentVolumeClaim) {
	if c.Status.Phase != corev1.ClaimPending || c.Spec.VolumeName != "" || c.DeletionTimestamp != nil {
		return
	}
	if c.Spec.StorageClassName == nil || *c.Spec.StorageClassName != p.class {
		return
	}
	if c.Annotations[annProvisioner] != Name && c.Annotations[annProvisionerV1] != Name {
		return
	}
	name := "pvc-" + string(c.UID)
	path := filepath.Join(p.dir, name)
	if err := os.MkdirAll(path, 0o755); err != nil {
		p.log.Error("make the volume's directory", "claim", c.Namespace+"/"+c.Name, "err", err)
		return
	}
	size := c.Spec.Resources.Requests[corev1.ResourceStorage]
	if size.IsZero() {
		size = resource.MustParse("1Gi")
	}
	modes := c.Spec.AccessModes
	if len(modes) == 0 {
		modes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{annProvisionedBy: Name}},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: size},
			AccessModes:                   modes,
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
			StorageClassName:              p.class,
			VolumeMode:                    c.Spec.VolumeMode,
			ClaimRef: &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1",
				Namespace: c.Namespace, Name: c.Name, UID: c.UID},
			PersistentVolumeSource: corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: path}},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "kubernetes.io/hostname",
					Operator: corev1.NodeSelectorOpIn, Values: []string{p.node}}},
			}}}},
		},
	}
	if _, err := p.cs.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		p.log.Error("create a volume", "claim", c.Namespace+"/"+c.Name, "err", err)
		return
	}
	p.log.Info("provisioned", "claim", c.Namespace+"/"+c.Name, "volume", name, "path", path)
}

// volume deletes a volume of ours whose claim is gone, and its directory.
func (p *provisioner) volume(ctx context.Context, v *corev1.PersistentVolume) {
	if v.Annotations[annProvisionedBy] != Name || v.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete {
		return
	}
	if v.Status.Phase != corev1.VolumeReleased && v.Status.Phase != corev1.VolumeFailed {
		return
	}
	if v.Spec.Local != nil {
		path := filepath.Clean(v.Spec.Local.Path)
		if !strings.HasPrefix(path, filepath.Clean(p.dir)+string(os.PathSeparator)) {
			p.log.Error("refusing to delete a volume outside the volume directory", "volume", v.Name, "path", path)
			return
		}
		if err := os.RemoveAll(path); err != nil {
			p.log.Error("delete a volume's directory", "volume", v.Name, "err", err)
			return
		}
	}
	err := p.cs.CoreV1().PersistentVolumes().Delete(ctx, v.Name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		p.log.Error("delete a volume", "volume", v.Name, "err", err)
		return
	}
	p.log.Info("deleted", "volume", v.Name)
}
