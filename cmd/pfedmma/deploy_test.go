package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/pfedmma/pfedmma/config"
	"github.com/spf13/cobra"
)

// deployDir is the repository's deploy/ folder.
const deployDir = "../../deploy"

// shellCommands splits a shell command line into its simple commands (at
// ; & | && || and parentheses) and each into words, honouring single and
// double quotes (variables are kept as written). A comment ends the line.
func shellCommands(line string) [][]string {
	var cmds [][]string
	var words []string
	var cur strings.Builder
	inWord := false
	quote := byte(0)
	endWord := func() {
		if inWord {
			words = append(words, cur.String())
			cur.Reset()
			inWord = false
		}
	}
	endCommand := func() {
		endWord()
		if len(words) > 0 {
			cmds = append(cmds, words)
			words = nil
		}
	}
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			} else {
				cur.WriteByte(c)
			}
		case c == '\'' || c == '"':
			quote, inWord = c, true
		case c == '\\' && i+1 < len(line):
			i++
			cur.WriteByte(line[i])
			inWord = true
		case c == ' ' || c == '\t':
			endWord()
		case c == ';' || c == '&' || c == '|' || c == '(' || c == ')':
			endCommand()
		case c == '#' && !inWord:
			endCommand()
			return cmds
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	endCommand()
	return cmds
}

// shellLines returns a shell script's logical lines: continuation lines
// joined, comment lines dropped.
func shellLines(script string) []string {
	var out []string
	var cur strings.Builder
	sc := bufio.NewScanner(strings.NewReader(script))
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if cur.Len() == 0 && strings.HasPrefix(l, "#") {
			continue
		}
		if strings.HasSuffix(l, "\\") {
			cur.WriteString(strings.TrimSuffix(l, "\\") + " ")
			continue
		}
		cur.WriteString(l)
		out = append(out, cur.String())
		cur.Reset()
	}
	if cur.Len() > 0 {
		out = append(out, cur.String())
	}
	return out
}

// pfedmmaArgs returns the arguments of each pfedmma invocation in a shell
// script: a command whose program is pfedmma (or a path ending in
// /pfedmma), possibly behind exec, srun and its options, or variable
// assignments.
func pfedmmaArgs(script string) [][]string {
	var out [][]string
	for _, l := range shellLines(script) {
		for _, w := range shellCommands(l) {
			for i, x := range w {
				if x == "pfedmma" || strings.HasSuffix(x, "/pfedmma") {
					out = append(out, w[i+1:])
					break
				}
				if x != "exec" && x != "srun" && !strings.HasPrefix(x, "-") && !strings.Contains(x, "=") {
					break // another program
				}
			}
		}
	}
	return out
}

// deployCommand is one pfedmma command line of a deploy/ file.
type deployCommand struct {
	where string
	args  []string
}

// checkPfedmmaArgs checks a pfedmma command line against the real command
// tree: the subcommand exists, every flag is one it accepts, a flag that
// takes a value has one, and presets are real.
func checkPfedmmaArgs(args []string) error {
	cmd, _, err := rootCmd.Find(args)
	if err != nil {
		return err
	}
	if cmd == rootCmd && len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		return errors.New("unknown command " + args[0])
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "--") {
			continue
		}
		name, value, hasValue := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if name == "help" { // cobra adds it when it executes
			continue
		}
		f := cmd.Flag(name)
		if f == nil {
			return errors.New(cmd.CommandPath() + " has no flag --" + name)
		}
		if f.Value.Type() == "bool" || hasValue {
			if name == "preset" && !isPreset(cmd, value) {
				return errors.New("--preset " + value + " is not a preset")
			}
			continue
		}
		if i+1 >= len(args) || strings.HasPrefix(args[i+1], "--") {
			return errors.New("--" + name + " has no value")
		}
		if name == "preset" && !isPreset(cmd, args[i+1]) {
			return errors.New("--preset " + args[i+1] + " is not a preset")
		}
		i++
	}
	return nil
}

// yamlDocs decodes every document of a YAML file.
func yamlDocs(t *testing.T, path string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	var docs []map[string]any
	for {
		var d map[string]any
		err := dec.Decode(&d)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if d != nil {
			docs = append(docs, d)
		}
	}
	return docs
}

// dig follows keys (string: a map key; int: a list index) through a decoded
// YAML document.
func dig(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			v = m[k]
		case int:
			l, ok := v.([]any)
			if !ok || k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

// stringList is a YAML list of strings.
func stringList(v any) []string {
	l, _ := v.([]any)
	var out []string
	for _, x := range l {
		s, _ := x.(string)
		out = append(out, s)
	}
	return out
}

// TestDeployFiles checks deploy/: the Kubernetes manifests parse and hold
// what deploy/README.md describes (a coordinator StatefulSet with a volume
// claim for its SQLite state and a Service, a sites StatefulSet, every
// Secret made by make-secrets.sh), the shell scripts (Slurm, Secrets, and
// the sites' container script) are valid sh (`sh -n`), and every pfedmma
// command line in the Dockerfile, the scripts, the manifests and the README's
// code blocks uses only subcommands and flags the real binary accepts.
func TestDeployFiles(t *testing.T) {
	var cmds []deployCommand
	// shellcheck, where installed (Debian: apt-get install shellcheck), also
	// lints the scripts
	lint, _ := exec.LookPath("shellcheck")
	if lint == "" {
		t.Log("shellcheck is not installed: the scripts are checked with sh -n only")
	}
	shellCheck := func(where, script string) {
		t.Helper()
		c := exec.Command("sh", "-n")
		c.Stdin = strings.NewReader(script)
		if out, err := c.CombinedOutput(); err != nil {
			t.Errorf("%s is not valid sh: %v\n%s", where, err, out)
		}
		if lint != "" {
			c := exec.Command(lint, "-s", "sh", "-")
			c.Stdin = strings.NewReader(script)
			if out, err := c.CombinedOutput(); err != nil {
				t.Errorf("shellcheck %s: %v\n%s", where, err, out)
			}
		}
		for _, a := range pfedmmaArgs(script) {
			cmds = append(cmds, deployCommand{where, a})
		}
	}
	scripts, err := filepath.Glob(filepath.Join(deployDir, "*", "*.s*"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range scripts {
		if ext := filepath.Ext(p); ext != ".sh" && ext != ".sbatch" {
			continue
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(string(b), "#!/bin/sh\n") {
			t.Errorf("%s does not start with #!/bin/sh", p)
		}
		shellCheck(p, string(b))
	}
	if len(scripts) < 4 {
		t.Fatalf("deploy/: %d shell scripts, want the three Slurm files and make-secrets.sh: %v", len(scripts), scripts)
	}

	// the Dockerfile: exec-form ENTRYPOINT and CMD, and the RUN lines
	df, err := os.ReadFile(filepath.Join(deployDir, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	var entry, cmdArgs []string
	stages := 0
	for _, l := range shellLines(string(df)) {
		instr, rest, _ := strings.Cut(l, " ")
		switch strings.ToUpper(instr) {
		case "FROM":
			stages++
		case "ENTRYPOINT", "CMD":
			var v []string
			if err := json.Unmarshal([]byte(rest), &v); err != nil {
				t.Errorf("Dockerfile: %s is not in exec form (a JSON list): %v", l, err)
			}
			if strings.ToUpper(instr) == "ENTRYPOINT" {
				entry = v
			} else {
				cmdArgs = v
			}
		case "RUN":
			for _, a := range pfedmmaArgs(rest) {
				cmds = append(cmds, deployCommand{"Dockerfile RUN", a})
			}
		case "USER":
			if strings.HasPrefix(rest, "0") || strings.HasPrefix(rest, "root") {
				t.Errorf("Dockerfile: the image runs as root (%s)", l)
			}
		}
	}
	if stages != 2 || !strings.Contains(string(df), "USER 10001") {
		t.Errorf("Dockerfile: %d stages (want a build and a runtime stage), non-root user: %v", stages, strings.Contains(string(df), "USER 10001"))
	}
	if len(entry) != 1 || filepath.Base(entry[0]) != "pfedmma" {
		t.Errorf("Dockerfile: ENTRYPOINT %v, want the binary", entry)
	}
	cmds = append(cmds, deployCommand{"Dockerfile CMD", cmdArgs})

	// the Kubernetes manifests
	manifests, err := filepath.Glob(filepath.Join(deployDir, "k8s", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	secretsScript, err := os.ReadFile(filepath.Join(deployDir, "k8s", "make-secrets.sh"))
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]map[string]any{}
	for _, p := range manifests {
		for _, d := range yamlDocs(t, p) {
			kind, _ := d["kind"].(string)
			name, _ := dig(d, "metadata", "name").(string)
			if d["apiVersion"] == nil || kind == "" || (name == "" && kind != "Kustomization") {
				t.Errorf("%s: a document without apiVersion, kind or metadata.name: %v", p, d)
				continue
			}
			kinds[kind+"/"+name] = d
			if kind == "Kustomization" {
				for _, r := range stringList(d["resources"]) {
					if _, err := os.Stat(filepath.Join(deployDir, "k8s", r)); err != nil {
						t.Errorf("%s: resource %s: %v", p, r, err)
					}
				}
			}
			if kind != "StatefulSet" && kind != "Deployment" {
				continue
			}
			spec := dig(d, "spec", "template", "spec")
			for _, v := range dig(spec, "volumes").([]any) {
				if s, ok := dig(v, "secret", "secretName").(string); ok && !strings.Contains(string(secretsScript), "apply "+s+" ") {
					t.Errorf("%s: secret %s is not made by make-secrets.sh", p, s)
				}
			}
			for i := range len(dig(spec, "containers").([]any)) {
				c := dig(spec, "containers", i)
				where := p + " " + name
				command, args := stringList(dig(c, "command")), stringList(dig(c, "args"))
				switch {
				case len(command) == 0: // the image's entrypoint: pfedmma
					cmds = append(cmds, deployCommand{where, args})
				case slices.Equal(command, []string{"/bin/sh", "-c"}) && len(args) == 1:
					shellCheck(where+" (its sh -c script)", args[0])
				default:
					t.Errorf("%s: container command %v: want the image's entrypoint or /bin/sh -c", where, command)
				}
				if dig(c, "securityContext", "allowPrivilegeEscalation") != false {
					t.Errorf("%s: the container may escalate privileges", where)
				}
			}
			if dig(spec, "securityContext", "runAsNonRoot") != true {
				t.Errorf("%s %s: not runAsNonRoot", p, name)
			}
		}
	}
	coord := kinds["StatefulSet/pfedmma-coordinator"]
	if coord == nil || kinds["Service/pfedmma-coordinator"] == nil || kinds["StatefulSet/pfedmma-sites"] == nil {
		t.Fatalf("deploy/k8s: want a coordinator StatefulSet and Service and a sites StatefulSet; have %v", slices.Sorted(maps.Keys(kinds)))
	}
	if dig(coord, "spec", "replicas") != 1 || dig(coord, "spec", "volumeClaimTemplates", 0, "metadata", "name") != "state" {
		t.Errorf("the coordinator StatefulSet: want one replica and a volume claim for its state")
	}

	// the code blocks of deploy/README.md, of the README and of docs/deploy.md
	for _, p := range []string{filepath.Join(deployDir, "README.md"), "../../README.md", "../../docs/deploy.md"} {
		readme, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		in, shell := false, false // in a code block; a shell one (```sh)
		var block strings.Builder
		for _, l := range strings.Split(string(readme), "\n") {
			if fence := strings.TrimSpace(l); strings.HasPrefix(fence, "```") {
				if in && shell {
					for _, a := range pfedmmaArgs(block.String()) {
						cmds = append(cmds, deployCommand{p, a})
					}
				}
				block.Reset()
				in = !in
				shell = in && (fence == "```sh" || fence == "```bash")
				continue
			}
			if in {
				block.WriteString(l + "\n")
			}
		}
	}

	seen := map[string]bool{}
	for _, c := range cmds {
		if err := checkPfedmmaArgs(c.args); err != nil {
			t.Errorf("%s: pfedmma %s: %v", c.where, strings.Join(c.args, " "), err)
		}
		if sub, _, err := rootCmd.Find(c.args); err == nil {
			seen[sub.CommandPath()] = true
			if sub.Name() == "site" && slices.Contains(c.args, "--clients") {
				seen["site --clients"] = true
			}
		}
	}
	for _, want := range []string{"pfedmma serve", "pfedmma site", "site --clients", "pfedmma certs init", "pfedmma version"} {
		if !seen[want] {
			t.Errorf("no %q command line found in deploy/ (found %v)", want, seen)
		}
	}
}

// TestDeployChecksBite: the checks of TestDeployFiles refuse what they
// should (an unknown flag, a missing value, an unknown preset, an unknown
// command) and the shell splitting finds pfedmma behind srun and exec.
func TestDeployChecksBite(t *testing.T) {
	for _, bad := range [][]string{
		{"site", "--clients", "0-1", "--no-such-flag", "x"},
		{"serve", "--certs", "--state", "s"},
		{"serve", "--preset", "no-such-preset"},
		{"no-such-command"},
	} {
		if err := checkPfedmmaArgs(bad); err == nil {
			t.Errorf("pfedmma %s was accepted", strings.Join(bad, " "))
		}
	}
	if err := checkPfedmmaArgs([]string{"site", "--clients", "0-1", "--threads", "4", "--set", "federation.clients=3", "--insecure-dev"}); err != nil {
		t.Errorf("a valid site command line: %v", err)
	}
	got := pfedmmaArgs("# pfedmma ignored\nexec srun --ntasks=1 pfedmma site --server \"$addr\" \\\n  --clients \"$a-$b\" $X; echo done\n" +
		"go build -o /out/pfedmma . && /out/pfedmma version\nkubectl -n pfedmma get pods\n")
	want := [][]string{{"site", "--server", "$addr", "--clients", "$a-$b", "$X"}, {"version"}}
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("pfedmmaArgs: %q, want %q", got, want)
	}
}

// isPreset reports whether v names a preset; `bench experiment --preset`
// also takes NAME:DATASET.
func isPreset(cmd *cobra.Command, v string) bool {
	if cmd.CommandPath() == "pfedmma bench experiment" {
		v, _, _ = strings.Cut(v, ":")
	}
	return slices.Contains(config.PresetNames(), v)
}
