//go:build windows

package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"slices"
	"unsafe"

	"golang.org/x/sys/windows"
)

// The AppContainer helper (appcontainer.go): this program started by wrap with the plan in
// envAppContainer. It makes (or finds) the container's profile, puts the plan's access entries
// in place for the container's SID, starts the command in the container — inside a job that
// ends it when the helper ends — waits for it and exits with its code. It is never run in CI:
// no Windows machine is at hand and Wine has no AppContainers (docs/sandbox.md).

var (
	userenv                          = windows.NewLazySystemDLL("userenv.dll")
	procCreateAppContainerProfile    = userenv.NewProc("CreateAppContainerProfile")
	procDeriveAppContainerSidFromApp = userenv.NewProc("DeriveAppContainerSidFromAppContainerName")
)

const (
	// procThreadAttributeSecurityCapabilities is PROC_THREAD_ATTRIBUTE_SECURITY_CAPABILITIES.
	procThreadAttributeSecurityCapabilities = 0x00020009
	// hresultAlreadyExists is HRESULT_FROM_WIN32(ERROR_ALREADY_EXISTS).
	hresultAlreadyExists = 0x800700B7
	// fileAllAccess is FILE_ALL_ACCESS.
	fileAllAccess = windows.STANDARD_RIGHTS_REQUIRED | windows.SYNCHRONIZE | 0x1FF
	fileReadExec  = windows.FILE_GENERIC_READ | windows.FILE_GENERIC_EXECUTE
	fileReadWrite = fileReadExec | windows.FILE_GENERIC_WRITE | windows.DELETE | 0x40 // 0x40: FILE_DELETE_CHILD
)

// securityCapabilities is SECURITY_CAPABILITIES.
type securityCapabilities struct {
	AppContainerSid *windows.SID
	Capabilities    *windows.SIDAndAttributes
	CapabilityCount uint32
	Reserved        uint32
}

// appContainerAvailable says why this Windows cannot run AppContainers (nil when it can).
func appContainerAvailable() error {
	if err := procCreateAppContainerProfile.Find(); err != nil {
		return errors.New("this Windows has no AppContainers (Windows 8 or later is needed; Wine has none)")
	}
	if err := procDeriveAppContainerSidFromApp.Find(); err != nil {
		return errors.New("this Windows has no AppContainers (Windows 8 or later is needed; Wine has none)")
	}
	return nil
}

// appContainerMain is the helper: it returns the exit code for the process (126 when the
// sandbox could not be made: nothing ran).
func appContainerMain(raw string) int {
	fail := func(format string, a ...any) int {
		fmt.Fprintf(os.Stderr, "cubicle sandbox: "+format+"\n", a...)
		return 126
	}
	var plan acPlan
	if err := json.Unmarshal([]byte(raw), &plan); err != nil {
		return fail("bad plan: %v", err)
	}
	if len(os.Args) < 2 {
		return fail("no command")
	}
	sid, err := containerSID(plan.Name)
	if err != nil {
		return fail("AppContainer %s: %v", plan.Name, err)
	}
	defer windows.FreeSid(sid)
	for _, r := range plan.Rules {
		if err := grant(sid, r); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue // not there: nothing to hide, nothing to grant (as on Linux)
			}
			return fail("access for the AppContainer on %s: %v", r.Path, err)
		}
	}
	bin, err := exec.LookPath(os.Args[1])
	if err != nil {
		return fail("%v", err)
	}
	line := os.Getenv(EnvCmdLine)
	if line == "" {
		line = windows.ComposeCommandLine(os.Args[1:])
	}
	code, err := runContained(sid, plan, bin, line, childEnv(os.Environ(), plan.Scratch))
	if err != nil {
		return fail("%v", err)
	}
	return int(code)
}

// containerSID is the SID of AppContainer name, its profile made the first time.
func containerSID(name string) (*windows.SID, error) {
	n, err := windows.UTF16PtrFromString(name)
	if err != nil {
		return nil, err
	}
	desc, _ := windows.UTF16PtrFromString("Cubicle host tools")
	var sid *windows.SID
	hr, _, _ := procCreateAppContainerProfile.Call(uintptr(unsafe.Pointer(n)), uintptr(unsafe.Pointer(desc)), uintptr(unsafe.Pointer(desc)),
		0, 0, uintptr(unsafe.Pointer(&sid)))
	if uint32(hr) == hresultAlreadyExists {
		hr, _, _ = procDeriveAppContainerSidFromApp.Call(uintptr(unsafe.Pointer(n)), uintptr(unsafe.Pointer(&sid)))
	}
	if uint32(hr) != 0 || sid == nil {
		return nil, fmt.Errorf("HRESULT %#x", uint32(hr))
	}
	return sid, nil
}

// grant puts rule r in place for sid on its path, unless an entry of its kind for sid with
// its rights is there already (a directory's is inherited by what it holds).
func grant(sid *windows.SID, r WindowsRule) error {
	st, err := os.Stat(r.Path)
	if err != nil {
		return err
	}
	var (
		mode windows.ACCESS_MODE = windows.GRANT_ACCESS
		mask windows.ACCESS_MASK = fileReadExec
		kind byte                = windows.ACCESS_ALLOWED_ACE_TYPE
	)
	switch {
	case r.Deny:
		mode, mask, kind = windows.DENY_ACCESS, fileAllAccess, windows.ACCESS_DENIED_ACE_TYPE
	case r.Write:
		mask = fileReadWrite
	}
	sd, err := windows.GetNamedSecurityInfo(r.Path, windows.SE_FILE_OBJECT, windows.DACL_SECURITY_INFORMATION)
	if err != nil {
		return err
	}
	dacl, _, err := sd.DACL()
	if err != nil && !errors.Is(err, windows.ERROR_OBJECT_NOT_FOUND) {
		return err
	}
	if hasEntry(dacl, sid, kind, mask) {
		return nil
	}
	inherit := uint32(windows.NO_INHERITANCE)
	if st.IsDir() {
		inherit = windows.SUB_CONTAINERS_AND_OBJECTS_INHERIT
	}
	acl, err := windows.ACLFromEntries([]windows.EXPLICIT_ACCESS{{AccessPermissions: mask, AccessMode: mode,
		Inheritance: inherit, Trustee: windows.TRUSTEE{TrusteeForm: windows.TRUSTEE_IS_SID, TrusteeType: windows.TRUSTEE_IS_UNKNOWN,
			TrusteeValue: windows.TrusteeValueFromSID(sid)}}}, dacl)
	if err != nil {
		return err
	}
	return windows.SetNamedSecurityInfo(r.Path, windows.SE_FILE_OBJECT, windows.DACL_SECURITY_INFORMATION, nil, nil, acl, nil)
}

// hasEntry reports whether dacl holds an entry of kind for sid with at least mask.
func hasEntry(dacl *windows.ACL, sid *windows.SID, kind byte, mask windows.ACCESS_MASK) bool {
	if dacl == nil {
		return false
	}
	for i := uint32(0); i < uint32(dacl.AceCount); i++ {
		var ace *windows.ACCESS_ALLOWED_ACE
		if windows.GetAce(dacl, i, &ace) != nil {
			return false
		}
		if ace.Header.AceType != kind || ace.Mask&mask != mask {
			continue
		}
		if (*windows.SID)(unsafe.Pointer(&ace.SidStart)).Equals(sid) {
			return true
		}
	}
	return false
}

// runContained runs bin with command line line and environment env in the AppContainer sid
// with the plan's capabilities, inside a job that ends with this process, and returns its
// exit code. The command gets this process's standard handles and nothing else.
func runContained(sid *windows.SID, plan acPlan, bin, line string, env []string) (uint32, error) {
	caps := make([]windows.SIDAndAttributes, 0, len(plan.Capabilities))
	for _, c := range plan.Capabilities {
		s, err := windows.StringToSid(c)
		if err != nil {
			return 0, fmt.Errorf("capability %s: %w", c, err)
		}
		caps = append(caps, windows.SIDAndAttributes{Sid: s, Attributes: windows.SE_GROUP_ENABLED})
	}
	sc := securityCapabilities{AppContainerSid: sid, CapabilityCount: uint32(len(caps))}
	if len(caps) > 0 {
		sc.Capabilities = &caps[0]
	}
	attrs, err := windows.NewProcThreadAttributeList(2)
	if err != nil {
		return 0, err
	}
	defer attrs.Delete()
	if err := attrs.Update(procThreadAttributeSecurityCapabilities, unsafe.Pointer(&sc), unsafe.Sizeof(sc)); err != nil {
		return 0, fmt.Errorf("security capabilities: %w", err)
	}
	si := windows.StartupInfoEx{ProcThreadAttributeList: attrs.List()}
	si.Cb = uint32(unsafe.Sizeof(si))
	var handles []windows.Handle
	for i, h := range []windows.Handle{windows.Stdin, windows.Stdout, windows.Stderr} {
		if h == 0 || h == windows.InvalidHandle {
			continue
		}
		_ = windows.SetHandleInformation(h, windows.HANDLE_FLAG_INHERIT, windows.HANDLE_FLAG_INHERIT)
		switch i {
		case 0:
			si.StdInput = h
		case 1:
			si.StdOutput = h
		case 2:
			si.StdErr = h
		}
		if !slices.Contains(handles, h) {
			handles = append(handles, h)
		}
	}
	if len(handles) > 0 {
		si.Flags |= windows.STARTF_USESTDHANDLES
		if err := attrs.Update(windows.PROC_THREAD_ATTRIBUTE_HANDLE_LIST, unsafe.Pointer(&handles[0]), uintptr(len(handles))*unsafe.Sizeof(handles[0])); err != nil {
			return 0, fmt.Errorf("handle list: %w", err)
		}
	}
	job, err := windows.CreateJobObject(nil, nil)
	if err != nil {
		return 0, fmt.Errorf("job object: %w", err)
	}
	defer windows.CloseHandle(job)
	limits := windows.JOBOBJECT_EXTENDED_LIMIT_INFORMATION{}
	limits.BasicLimitInformation.LimitFlags = windows.JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE
	if _, err := windows.SetInformationJobObject(job, windows.JobObjectExtendedLimitInformation,
		uintptr(unsafe.Pointer(&limits)), uint32(unsafe.Sizeof(limits))); err != nil {
		return 0, fmt.Errorf("job object: %w", err)
	}
	app, err := windows.UTF16PtrFromString(bin)
	if err != nil {
		return 0, err
	}
	cmd, err := windows.UTF16FromString(line)
	if err != nil {
		return 0, err
	}
	block := envBlock(env)
	var pi windows.ProcessInformation
	flags := uint32(windows.CREATE_UNICODE_ENVIRONMENT | windows.EXTENDED_STARTUPINFO_PRESENT | windows.CREATE_SUSPENDED | windows.CREATE_NO_WINDOW)
	if err := windows.CreateProcess(app, &cmd[0], nil, nil, len(handles) > 0, flags, &block[0], nil, &si.StartupInfo, &pi); err != nil {
		return 0, fmt.Errorf("start %s in the AppContainer: %w", bin, err)
	}
	defer windows.CloseHandle(pi.Process)
	defer windows.CloseHandle(pi.Thread)
	if err := windows.AssignProcessToJobObject(job, pi.Process); err != nil {
		_ = windows.TerminateProcess(pi.Process, 126)
		return 0, fmt.Errorf("job object: %w", err)
	}
	if _, err := windows.ResumeThread(pi.Thread); err != nil {
		_ = windows.TerminateJobObject(job, 126)
		return 0, fmt.Errorf("resume %s: %w", bin, err)
	}
	if _, err := windows.WaitForSingleObject(pi.Process, windows.INFINITE); err != nil {
		return 0, err
	}
	var code uint32
	if err := windows.GetExitCodeProcess(pi.Process, &code); err != nil {
		return 0, err
	}
	return code, nil
}
