package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// containerUID is the image's user (deploy/Dockerfile, securityContext).
const containerUID = 10001

// asContainerUser returns the command prefix that runs a program as uid and
// gid 10001 with no supplementary groups; the test is skipped, naming why,
// when this process cannot (not root, or no setpriv), and fails under
// CI=true.
func asContainerUser(t *testing.T) []string {
	t.Helper()
	why := ""
	setpriv, err := exec.LookPath("setpriv")
	switch {
	case os.Getuid() != 0:
		why = "not root: cannot run the scripts as uid 10001"
	case err != nil:
		why = "setpriv (util-linux) not found: cannot run the scripts as uid 10001"
	}
	if why != "" {
		if os.Getenv("CI") == "true" {
			t.Fatal(why)
		}
		t.Skip(why)
	}
	return []string{setpriv, "--reuid=10001", "--regid=10001", "--clear-groups"}
}

// scriptRoot is a folder tree the container user can enter: a fresh
// temporary folder (mode 0755, removed at the end) and helpers to make
// folders and files there with an owner and mode.
type scriptRoot struct {
	t    *testing.T
	root string
}

func newScriptRoot(t *testing.T) *scriptRoot {
	root, err := os.MkdirTemp("", "pfedmma-deploy-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	return &scriptRoot{t, root}
}

// dir makes root/rel (and its parents, 0755 root-owned) owned by uid.
func (s *scriptRoot) dir(rel string, uid int) string {
	p := filepath.Join(s.root, rel)
	if err := os.MkdirAll(p, 0o755); err != nil {
		s.t.Fatal(err)
	}
	s.own(p, uid, 0o755|os.ModeDir)
	return p
}

// file writes root/rel with the given owner, group and mode.
func (s *scriptRoot) file(rel, content string, uid, gid int, mode os.FileMode) string {
	p := filepath.Join(s.root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		s.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		s.t.Fatal(err)
	}
	if err := os.Chown(p, uid, gid); err != nil {
		s.t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		s.t.Fatal(err)
	}
	return p
}

func (s *scriptRoot) own(p string, uid int, mode os.FileMode) {
	if err := os.Chown(p, uid, uid); err != nil {
		s.t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		s.t.Fatal(err)
	}
}

// fakeBin writes stand-ins for pfedmma and srun into root/bin: pfedmma
// appends its arguments, and the hosted pairs of its --certs folder, to
// root/pfedmma.log and exits 0; srun drops its options and runs the rest.
func (s *scriptRoot) fakeBin() string {
	bin := s.dir("bin", 0)
	log := filepath.Join(s.root, "pfedmma.log")
	s.file("pfedmma.log", "", containerUID, containerUID, 0o644)
	s.file("bin/pfedmma", `#!/bin/sh
out=`+log+`
echo "pfedmma $*" >> "$out"
while [ $# -gt 0 ]; do
	if [ "$1" = --certs ]; then echo "hosted: $(ls "$2/sites" | tr '\n' ' ')" >> "$out"; fi
	shift
done
`, 0, 0, 0o755)
	s.file("bin/srun", `#!/bin/sh
while [ $# -gt 0 ]; do case $1 in --*) shift ;; *) break ;; esac; done
exec "$@"
`, 0, 0, 0o755)
	return bin
}

// run runs argv as the container user in dir with env added; it returns the
// combined output and whether the command succeeded.
func (s *scriptRoot) run(as []string, dir string, env []string, argv ...string) (string, bool) {
	cmd := exec.Command(as[0], append(slices.Clone(as[1:]), argv...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err == nil
}

func (s *scriptRoot) log() string {
	b, err := os.ReadFile(filepath.Join(s.root, "pfedmma.log"))
	if err != nil {
		s.t.Fatal(err)
	}
	return string(b)
}

// sitesContainerScript is the container script of deploy/k8s/sites.yaml
// with its absolute folders moved under root.
func sitesContainerScript(t *testing.T, root string) string {
	t.Helper()
	var script string
	for _, d := range yamlDocs(t, filepath.Join(deployDir, "k8s", "sites.yaml")) {
		if d["kind"] == "StatefulSet" {
			args := stringList(dig(d, "spec", "template", "spec", "containers", 0, "args"))
			if len(args) != 1 {
				t.Fatalf("sites.yaml: the container's args are %q, want one script", args)
			}
			script = args[0]
		}
	}
	if script == "" {
		t.Fatal("sites.yaml: no StatefulSet")
	}
	for _, p := range []string{"/run/certs", "/secrets/", "/state"} {
		if !strings.Contains(script, p) {
			t.Fatalf("sites.yaml's script does not use %s", p)
		}
		script = strings.ReplaceAll(script, p, root+p)
	}
	return script
}

// TestDeploySitesContainerRestarts runs the sites' container script of
// deploy/k8s/sites.yaml twice as uid 10001 in the same folders, as a
// container restarted in its pod finds them: the in-memory certificates
// folder keeps the read-only copies of the first start. Both starts must
// reach pfedmma with the pod's clients' pairs only. A state volume the user
// cannot write is refused naming --state, the uid and what to change.
func TestDeploySitesContainerRestarts(t *testing.T) {
	as := asContainerUser(t)
	s := newScriptRoot(t)
	bin := s.fakeBin()
	names := []string{"c000", "c001", "c002", "c003", "c004"}
	s.file("secrets/federation/ca.crt", "CA\n", 0, containerUID, 0o444)
	s.file("secrets/federation/sites.txt", strings.Join(names, "\n")+"\n", 0, containerUID, 0o444)
	for _, n := range names {
		// defaultMode 0440, group: the pod's fsGroup
		s.file("secrets/sites/"+n+".crt", "crt "+n+"\n", 0, containerUID, 0o440)
		s.file("secrets/sites/"+n+".key", "key "+n+"\n", 0, containerUID, 0o440)
	}
	s.dir("run/certs", containerUID) // the emptyDir
	state := s.dir("state", containerUID)
	script := sitesContainerScript(t, s.root)
	env := []string{"POD_NAME=pfedmma-sites-1", "CLIENTS=5", "REPLICAS=2", "PATH=" + bin + ":/usr/bin:/bin"}
	for start := 1; start <= 2; start++ {
		out, ok := s.run(as, state, env, "/bin/sh", "-c", script)
		if !ok {
			t.Fatalf("start %d of the sites container (uid 10001) failed:\n%s", start, out)
		}
		log := s.log()
		if n := strings.Count(log, "pfedmma site "); n != start {
			t.Fatalf("after start %d pfedmma site ran %d times:\n%s", start, n, log)
		}
		if !strings.Contains(log, "--clients 3-4") {
			t.Errorf("pod 1 of 2 over 5 clients does not host clients 3-4:\n%s", log)
		}
		lines := strings.Split(strings.TrimSpace(log), "\n")
		if got, want := lines[len(lines)-1], "hosted: c003.crt c003.key c004.crt c004.key"; got != want {
			t.Errorf("start %d: the certificates folder holds %q, want %q", start, got, want)
		}
	}
	s.own(state, 0, 0o755|os.ModeDir)
	out, ok := s.run(as, s.root, env, "/bin/sh", "-c", script)
	if ok {
		t.Fatalf("the script started with a state folder uid 10001 cannot write:\n%s", out)
	}
	for _, want := range []string{"--state", "not writable by uid 10001", "fsGroup"} {
		if !strings.Contains(out, want) {
			t.Errorf("the refusal of an unwritable /state does not say %q:\n%s", want, out)
		}
	}
}

// TestDeploySlurmScriptsRestart runs deploy/slurm's coordinator and sites
// job scripts twice each as uid 10001 in the same shared folder (a requeued
// job finds the first run's files), with srun and pfedmma stood in for:
// both runs must succeed and start pfedmma with the same command line.
func TestDeploySlurmScriptsRestart(t *testing.T) {
	as := asContainerUser(t)
	s := newScriptRoot(t)
	bin := s.fakeBin()
	work := s.dir("work", containerUID)
	s.file("work/certs/sites.txt", "c000\nc001\nc002\n", containerUID, containerUID, 0o644)
	for _, name := range []string{"coordinator.sbatch", "sites.sbatch"} {
		b, err := os.ReadFile(filepath.Join(deployDir, "slurm", name))
		if err != nil {
			t.Fatal(err)
		}
		s.file("slurm/"+name, string(b), 0, 0, 0o755)
	}
	env := []string{"PFEDMMA_CLIENTS=3", "PFEDMMA_WORK=" + work, "PFEDMMA_BIN_DIR=" + bin, "PFEDMMA_COORD_JOB=42",
		"SLURM_JOB_ID=42", "SLURM_ARRAY_TASK_COUNT=2", "SLURM_ARRAY_TASK_ID=1", "SLURM_ARRAY_TASK_MIN=0",
		"PFEDMMA_COORDINATOR_HOST=node01", "PATH=/usr/bin:/bin"}
	for _, name := range []string{"coordinator.sbatch", "sites.sbatch"} {
		var first string
		for run := 1; run <= 2; run++ {
			before := s.log()
			out, ok := s.run(as, work, env, "/bin/sh", filepath.Join(s.root, "slurm", name))
			if !ok {
				t.Fatalf("%s run %d (uid 10001) failed:\n%s", name, run, out)
			}
			line := strings.SplitN(strings.TrimPrefix(s.log(), before), "\n", 2)[0]
			if !strings.HasPrefix(line, "pfedmma ") {
				t.Fatalf("%s run %d did not start pfedmma:\n%s", name, run, out)
			}
			if run == 1 {
				first = line
			} else if line != first {
				t.Errorf("%s: the second run started %q, the first %q", name, line, first)
			}
		}
	}
	log := s.log()
	for _, want := range []string{"pfedmma serve --listen 0.0.0.0:7443", "--state coordinator", "pfedmma site --server node01:7443", "--clients 2-2"} {
		if !strings.Contains(log, want) {
			t.Errorf("the scripts' pfedmma calls lack %q:\n%s", want, log)
		}
	}
}

// TestDeployServeUnwritableState runs `pfedmma serve` as uid 10001 (the
// image's user) on a bind-mounted state folder it cannot write, as the
// Docker example in deploy/README.md did: the error names --state, the
// folder, the user and the permission (before: "coordstore …: schema:
// unable to open database file (14)").
func TestDeployServeUnwritableState(t *testing.T) {
	as := asContainerUser(t)
	s := newScriptRoot(t)
	certs := filepath.Join(s.root, "certs")
	if _, err := execute(t, "certs", "init", "--dir", certs, "--sites", "a,b", "--host", "localhost"); err != nil {
		t.Fatal(err)
	}
	if err := filepath.Walk(certs, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Chown(p, containerUID, containerUID)
	}); err != nil {
		t.Fatal(err)
	}
	state := s.dir("state", 0) // the host user's folder
	s.dir("cache", containerUID)
	data, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	bin := s.file("pfedmma.test", string(data), 0, 0, 0o755)
	spec, err := json.Marshal([]string{"serve", "--listen", "127.0.0.1:0", "--certs", certs, "--state", state,
		"--preset", "world-deploy", "--set", "federation.clients=2"})
	if err != nil {
		t.Fatal(err)
	}
	env := []string{cliHelperEnv + "=" + string(spec), "XDG_CACHE_HOME=" + filepath.Join(s.root, "cache")}
	out, ok := s.run(as, s.root, env, bin, "-test.run=^TestCLIHelperProcess$", "-test.count=1")
	if ok {
		t.Fatalf("serve started on a state folder uid 10001 cannot write:\n%s", out)
	}
	for _, want := range []string{"--state", state, "permission denied", "uid 10001", "chown"} {
		if !strings.Contains(out, want) {
			t.Errorf("serve's error does not say %q:\n%s", want, out)
		}
	}
}
