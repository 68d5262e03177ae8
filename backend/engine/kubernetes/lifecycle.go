package kubernetes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"

	"cubicle/backend/engine"
	"cubicle/backend/fault"
	"cubicle/backend/store"
)

// unschedulableGrace is how long a Pod may stay unschedulable while one of its claims is
// still unbound (the scheduler says so until a volume is provisioned) before the start
// fails; with every claim bound, the first "Unschedulable" fails it.
const unschedulableGrace = 20 * time.Second

// StartContainer creates container id's Pod and waits until its container runs. A running
// container is left as it is; a Pod still being deleted (a stop under way) is waited out;
// an exited one is replaced. A cluster without room for the Pod (namespace quota, or no
// node that fits its requests) is fault.ErrConflict; an image the nodes cannot pull is
// fault.ErrUnavailable; both say what to do. The Pod of a failed start is left for the
// caller to stop (StopContainer), so that its events and logs can be read.
func (c *Client) StartContainer(ctx context.Context, id string) error {
	op := fmt.Sprintf("start container %q", id)
	cm, err := c.record(ctx, op, id)
	if err != nil {
		return err
	}
	p, err := c.pod(ctx, op, id)
	if err != nil {
		return err
	}
	if p != nil {
		switch st := c.state(cm, p); {
		case st.Running:
			return nil
		case p.DeletionTimestamp == nil && st.Status == statusCreated:
			return c.waitRunning(ctx, op, id, p.ResourceVersion)
		case p.DeletionTimestamp == nil:
			// exited: its successor takes the name
			if err := c.deletePod(ctx, op, id, 0); err != nil {
				return err
			}
		}
		if err := c.waitGone(ctx, op, id, c.graceOf(cm)+time.Minute); err != nil {
			return err
		}
	}
	var pod corev1.Pod
	if err := json.Unmarshal([]byte(cm.Data[dataPod]), &pod); err != nil {
		return &engine.Error{Op: op, Class: fault.ErrInvalid, Err: fmt.Errorf("the container's record holds no pod: %w", err)}
	}
	pod.Namespace = c.ns
	pod.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: cm.Name, UID: cm.UID}}
	created, err := c.cs.CoreV1().Pods(c.ns).Create(ctx, &pod, metav1.CreateOptions{})
	if err != nil {
		err = c.wrap(op, err)
		if errors.Is(err, fault.ErrForbidden) {
			if full := c.quotaFull(ctx, &pod); full != "" {
				return &engine.Error{Op: op, Class: fault.ErrConflict, Err: errors.New(full)}
			}
		}
		return err
	}
	if err := c.waitRunning(ctx, op, id, created.ResourceVersion); err != nil {
		return err
	}
	return c.confirmRunning(ctx, op, id)
}

// confirmProbe is the command confirmRunning runs in a started container: it lasts
// engine.StartConfirm, and a container whose main process ends meanwhile ends it too.
var confirmProbe = []string{"/bin/sh", "-c", fmt.Sprintf("sleep %.3f", engine.StartConfirm.Seconds())}

// confirmWait bounds how long confirmRunning waits for the kubelet to report an ended
// container after its probe failed (the kubelet notices an exit at its next relist, ~1 s).
const confirmWait = 15 * time.Second

// confirmRunning holds a Pod the kubelet reported Running to the engine contract's "at once"
// (engine.StartConfirm): the kubelet may report Running a moment before a container that
// exits at once ends, and report the end only at its next relist. A probe runs in the
// container for StartConfirm through the exec subresource (which asks the container runtime,
// not the Pod's status); when it fails, the Pod is followed until the kubelet reports the
// end, which is the start's error (exit code and last output). A probe that fails while the
// container keeps running (no shell in the image) leaves the start as it was.
func (c *Client) confirmRunning(ctx context.Context, op, id string) error {
	req := c.cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(c.ns).Name(id).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: containerName, Command: confirmProbe, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	ex, err := remotecommand.NewSPDYExecutor(c.rest, "POST", req.URL())
	if err != nil {
		return &engine.Error{Op: op, Class: fault.ErrInvalid, Err: err}
	}
	pctx, cancel := context.WithTimeout(ctx, confirmWait)
	err = ex.StreamWithContext(pctx, remotecommand.StreamOptions{Stdout: io.Discard, Stderr: io.Discard})
	cancel()
	if err == nil || ctx.Err() != nil {
		return nil
	}
	c.log.Debug("start probe failed; waiting for the kubelet's word on the container", "pod", id, "err", err)
	wctx, cancel := context.WithTimeout(ctx, confirmWait)
	defer cancel()
	for {
		p, gerr := c.cs.CoreV1().Pods(c.ns).Get(wctx, id, metav1.GetOptions{})
		if gerr != nil {
			if wctx.Err() != nil {
				return nil
			}
			return c.wrap(op, gerr)
		}
		if cs := containerStatus(p); cs != nil && cs.State.Terminated != nil {
			return c.exited(op, id, cs.State.Terminated)
		}
		if p.DeletionTimestamp != nil {
			return &engine.Error{Op: op, Class: fault.ErrConflict, Err: errors.New("the desktop's pod was deleted while it started")}
		}
		select {
		case <-wctx.Done():
			return nil // still running as far as the kubelet knows: the probe's failure was its own
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// graceOf is the grace period stored with a container record.
func (c *Client) graceOf(cm *corev1.ConfigMap) time.Duration {
	if s, err := strconv.Atoi(cm.Data[dataStopTimeout]); err == nil && s >= 0 {
		return time.Duration(s) * time.Second
	}
	return defaultStopTimeout
}

// waitRunning follows Pod id from resource version rv until its container runs or the start
// fails (see StartContainer).
func (c *Client) waitRunning(ctx context.Context, op, id, rv string) error {
	ctx, cancel := context.WithTimeout(ctx, c.opts.StartTimeout)
	defer cancel()
	var unschedSince time.Time
	check := func(p *corev1.Pod) (done bool, err error) {
		if p.DeletionTimestamp != nil {
			return true, &engine.Error{Op: op, Class: fault.ErrConflict, Err: errors.New("the desktop's pod was deleted while it started")}
		}
		if cs := containerStatus(p); cs != nil {
			if cs.State.Running != nil {
				return true, nil
			}
			if w := cs.State.Waiting; w != nil {
				switch w.Reason {
				case "ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull":
					return true, &engine.Error{Op: op, Class: fault.ErrUnavailable, Err: fmt.Errorf("the cluster cannot pull image %s (%s: %s); "+
						"check that the registry serves it to the nodes (Settings → Local VM prepares and pushes it)", cs.Image, w.Reason, w.Message)}
				case "CreateContainerConfigError", "CreateContainerError", "RunContainerError":
					return true, &engine.Error{Op: op, Class: fault.ErrInvalid, Err: fmt.Errorf("the cluster cannot run the desktop's container (%s: %s)", w.Reason, w.Message)}
				}
			}
			if t := cs.State.Terminated; t != nil {
				return true, c.exited(op, id, t)
			}
		}
		if p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
			return true, &engine.Error{Op: op, Class: fault.ErrUnavailable, Err: fmt.Errorf("the desktop's pod ended at once (%s: %s)", p.Status.Reason, p.Status.Message)}
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type != corev1.PodScheduled || cond.Status != corev1.ConditionFalse || cond.Reason != corev1.PodReasonUnschedulable {
				continue
			}
			if unschedSince.IsZero() {
				unschedSince = time.Now()
			}
			if time.Since(unschedSince) >= unschedulableGrace || c.claimsBound(ctx, p) {
				return true, &engine.Error{Op: op, Class: fault.ErrConflict, Err: fmt.Errorf("the cluster has no room for this desktop (%s); "+
					"stop another desktop, lower the desktops' memory and CPU limits, or add capacity to the cluster", cond.Message)}
			}
		}
		return false, nil
	}
	sel := metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", id).String(), ResourceVersion: rv}
	for {
		p, err := c.cs.CoreV1().Pods(c.ns).Get(ctx, id, metav1.GetOptions{})
		if err != nil {
			return c.wrap(op, err)
		}
		if done, err := check(p); done {
			return err
		}
		sel.ResourceVersion = p.ResourceVersion
		w, err := c.cs.CoreV1().Pods(c.ns).Watch(ctx, sel)
		if err != nil {
			return c.wrap(op, err)
		}
		done, err := c.follow(ctx, w, check, 5*time.Second)
		w.Stop()
		if done {
			return err
		}
		if ctx.Err() != nil {
			return &engine.Error{Op: op, Class: fault.ErrUnavailable, Err: fmt.Errorf("the desktop's pod did not run within %s: %w", c.opts.StartTimeout, ctx.Err())}
		}
	}
}

// follow applies check to the Pods a watch reports until check is done, the watch ends, or
// every has passed without an event (the caller then reads the Pod again: an unschedulable
// Pod's grace period runs out with no event).
func (c *Client) follow(ctx context.Context, w watch.Interface, check func(*corev1.Pod) (bool, error), every time.Duration) (bool, error) {
	t := time.NewTimer(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return false, nil
		case <-t.C:
			return false, nil
		case ev, ok := <-w.ResultChan():
			if !ok {
				return false, nil
			}
			switch ev.Type {
			case watch.Deleted:
				return true, &engine.Error{Op: "start", Class: fault.ErrConflict, Err: errors.New("the desktop's pod was deleted while it started")}
			case watch.Error:
				return false, nil
			}
			if p, ok := ev.Object.(*corev1.Pod); ok {
				if done, err := check(p); done {
					return true, err
				}
			}
		}
	}
}

// claimsBound reports whether every claim p mounts is bound (so that "Unschedulable" means
// the cluster lacks room, not that a volume is still being provisioned).
func (c *Client) claimsBound(ctx context.Context, p *corev1.Pod) bool {
	for _, v := range p.Spec.Volumes {
		if v.PersistentVolumeClaim == nil {
			continue
		}
		pvc, err := c.cs.CoreV1().PersistentVolumeClaims(c.ns).Get(ctx, v.PersistentVolumeClaim.ClaimName, metav1.GetOptions{})
		if err != nil || pvc.Status.Phase != corev1.ClaimBound {
			return false
		}
	}
	return true
}

// exited describes a container that ended during its start, with the end of its log.
func (c *Client) exited(op, id string, t *corev1.ContainerStateTerminated) error {
	return engine.ExitedAtOnce(op, int(t.ExitCode), t.Reason, c.LastOutput(context.Background(), id))
}

// LastOutput is the last engine.LogTail lines the desktop container of pod id wrote (best
// effort: "" when the cluster cannot say).
func (c *Client) LastOutput(ctx context.Context, id string) string {
	tail := int64(engine.LogTail)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	logs, err := c.cs.CoreV1().Pods(c.ns).GetLogs(id, &corev1.PodLogOptions{Container: containerName, TailLines: &tail}).Do(ctx).Raw()
	if err != nil {
		return ""
	}
	return string(logs)
}

// quotaFull names the namespace quota that has no room for pod, "" when none is full (or the
// quotas cannot be read).
func (c *Client) quotaFull(ctx context.Context, pod *corev1.Pod) string {
	qs, err := c.cs.CoreV1().ResourceQuotas(c.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return ""
	}
	need := corev1.ResourceList{corev1.ResourcePods: resource.MustParse("1"), "count/pods": resource.MustParse("1")}
	for _, ctr := range pod.Spec.Containers {
		for k, v := range ctr.Resources.Requests {
			need["requests."+k] = v
			if k == corev1.ResourceCPU || k == corev1.ResourceMemory {
				need[k] = v
			}
		}
		for k, v := range ctr.Resources.Limits {
			need["limits."+k] = v
		}
	}
	for _, q := range qs.Items {
		for k, hard := range q.Status.Hard {
			want, ok := need[k]
			if !ok {
				continue
			}
			used := q.Status.Used[k]
			sum := used.DeepCopy()
			sum.Add(want)
			if sum.Cmp(hard) > 0 {
				return fmt.Sprintf("the namespace %q has no room for another desktop: its quota %q allows %s %s and %s are in use, "+
					"the desktop needs %s; stop another desktop, or ask the cluster's admin to raise the quota",
					c.ns, q.Name, k, hard.String(), used.String(), want.String())
			}
		}
	}
	return ""
}

// StopContainer deletes container id's Pod with timeout as its grace period (0 = the spec's
// stop timeout) and waits until it is gone. A stopped container's stop returns nil; a
// missing container is fault.ErrNotFound.
func (c *Client) StopContainer(ctx context.Context, id string, timeout time.Duration) error {
	op := fmt.Sprintf("stop container %q", id)
	cm, err := c.record(ctx, op, id)
	if err != nil {
		return err
	}
	grace := timeout
	if grace <= 0 {
		grace = c.graceOf(cm)
	}
	if err := c.deletePod(ctx, op, id, grace); err != nil {
		if errors.Is(err, fault.ErrNotFound) {
			return nil
		}
		return err
	}
	return c.waitGone(ctx, op, id, grace+time.Minute)
}

// deletePod deletes Pod id with a grace period (0: at once).
func (c *Client) deletePod(ctx context.Context, op, id string, grace time.Duration) error {
	secs := int64((grace + time.Second - 1) / time.Second)
	err := c.cs.CoreV1().Pods(c.ns).Delete(ctx, id, metav1.DeleteOptions{GracePeriodSeconds: &secs})
	return c.wrap(op, err)
}

// waitGone waits until Pod id no longer exists (at most within).
func (c *Client) waitGone(ctx context.Context, op, id string, within time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	for {
		p, err := c.cs.CoreV1().Pods(c.ns).Get(ctx, id, metav1.GetOptions{})
		if err != nil {
			if err := c.wrap(op, err); errors.Is(err, fault.ErrNotFound) {
				return nil
			} else if ctx.Err() == nil {
				return err
			}
			return &engine.Error{Op: op, Class: fault.ErrUnavailable, Err: fmt.Errorf("the desktop's pod was not gone within %s", within)}
		}
		w, err := c.cs.CoreV1().Pods(c.ns).Watch(ctx, metav1.ListOptions{
			FieldSelector: fields.OneTermEqualSelector("metadata.name", id).String(), ResourceVersion: p.ResourceVersion})
		if err != nil {
			return c.wrap(op, err)
		}
		gone := false
		t := time.NewTimer(5 * time.Second)
	loop:
		for {
			select {
			case <-ctx.Done():
				break loop
			case <-t.C:
				break loop
			case ev, ok := <-w.ResultChan():
				if !ok {
					break loop
				}
				if ev.Type == watch.Deleted {
					gone = true
					break loop
				}
			}
		}
		t.Stop()
		w.Stop()
		if gone {
			return nil
		}
	}
}

// RemoveContainer deletes container id's record and Pod (never its claims). A running
// container is refused (fault.ErrConflict) unless force, which deletes its Pod at once.
func (c *Client) RemoveContainer(ctx context.Context, id string, force bool) error {
	op := fmt.Sprintf("remove container %q", id)
	cm, err := c.record(ctx, op, id)
	if err != nil {
		return err
	}
	p, err := c.pod(ctx, op, id)
	if err != nil {
		return err
	}
	if p != nil {
		st := c.state(cm, p)
		if !force && (st.Running || st.Status == statusCreated) {
			return &engine.Error{Op: op, Class: fault.ErrConflict, Err: errors.New("the container runs: stop it first")}
		}
		if err := c.deletePod(ctx, op, id, 0); err != nil && !errors.Is(err, fault.ErrNotFound) {
			return err
		}
		if err := c.waitGone(ctx, op, id, time.Minute); err != nil {
			return err
		}
	}
	// Its egress policy goes with it (the record owns it too; this does not wait for the
	// cluster's garbage collector).
	if err := c.SetEgress(ctx, id, store.EgressPolicy{}, nil); err != nil && !errors.Is(err, fault.ErrNotFound) {
		return err
	}
	bg := metav1.DeletePropagationBackground
	err = c.cs.CoreV1().ConfigMaps(c.ns).Delete(ctx, id, metav1.DeleteOptions{PropagationPolicy: &bg,
		Preconditions: &metav1.Preconditions{UID: &cm.UID}})
	return c.wrap(op, err)
}
