package transport

import (
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/pfedmma/pfedmma/dashboard"
	"github.com/pfedmma/pfedmma/transport/pb"
)

var testTask = &Task{Experiment: []byte("federation:\n  rounds: 3\n"), ModelSHA256: strings.Repeat("ab", 32), VocabSHA256: strings.Repeat("cd", 32),
	Fingerprint: strings.Repeat("0f", 32), UploadBytes: 4096}

// taskServer serves a coordinator with sites s0 and s1 (clear text) that
// sends task, on addr ("" picks a port).
func taskServer(t *testing.T, addr string, task *Task, settings []string) (*Server, *dashboard.EventLog, string) {
	t.Helper()
	events := &dashboard.EventLog{}
	srv, err := NewServer(ServerConfig{Sites: []string{"s0", "s1"}, Insecure: true, Spec: Spec{"w": {2}}, Task: task,
		Settings: settings, Events: events, PollWait: time.Second, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	go srv.GRPC().Serve(lis)
	t.Cleanup(srv.GRPC().Stop)
	return srv, events, lis.Addr().String()
}

// TestFetchTask: a site started before its coordinator receives the task
// once the coordinator is up, field for field, without being registered.
func TestFetchTask(t *testing.T) {
	addr := freePort(t)
	cfg := SiteConfig{Addr: addr, Name: "s1", Insecure: true, MinBackoff: 20 * time.Millisecond, MaxBackoff: 100 * time.Millisecond, Logger: quietLogger()}
	got := make(chan error, 1)
	var task *Task
	go func() {
		var err error
		task, err = FetchTask(t.Context(), cfg, 1, nil)
		got <- err
	}()
	time.Sleep(300 * time.Millisecond) // the site retries meanwhile
	srv, _, _ := taskServer(t, addr, testTask, nil)
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no task within 10 s of the coordinator's start")
	}
	if string(task.Experiment) != string(testTask.Experiment) || task.ModelSHA256 != testTask.ModelSHA256 || task.VocabSHA256 != testTask.VocabSHA256 ||
		task.Fingerprint != testTask.Fingerprint || task.UploadBytes != testTask.UploadBytes {
		t.Errorf("task %+v, sent %+v", task, testTask)
	}
	if srv.Status().Sites[1].State != "unregistered" {
		t.Errorf("asking for the task registered the site: %+v", srv.Status().Sites[1])
	}
	// the wrong client number is refused for good
	if _, err := FetchTask(t.Context(), cfg, 0, nil); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "client 1") {
		t.Errorf("wrong client ID: %v", err)
	}
}

// TestFetchTaskRefusals: a site with experiment flags that differ is
// refused, naming the keys; a coordinator that sends no task says so.
func TestFetchTaskRefusals(t *testing.T) {
	_, events, addr := taskServer(t, "", testTask, []string{"federation.rounds=3", "optimizer.lr=0.001"})
	cfg := SiteConfig{Addr: addr, Name: "s0", Insecure: true, Logger: quietLogger()}
	_, err := FetchTask(t.Context(), cfg, 0, []string{"federation.rounds=3", "optimizer.lr=0.01"})
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "optimizer.lr: coordinator 0.001, site 0.01") {
		t.Errorf("mismatched flags: %v, want a refusal naming optimizer.lr", err)
	}
	if ev := events.Recent(); len(ev) == 0 || !strings.Contains(ev[len(ev)-1].Message, "optimizer.lr") || ev[len(ev)-1].Site != "s0" {
		t.Errorf("events %+v, want the refusal naming s0 and optimizer.lr", ev)
	}
	if task, err := FetchTask(t.Context(), cfg, 0, []string{"federation.rounds=3", "optimizer.lr=0.001"}); err != nil || task.UploadBytes != 4096 {
		t.Errorf("matching flags: %v %+v", err, task)
	}
	_, _, bare := taskServer(t, "", nil, nil)
	cfg.Addr = bare
	if _, err := FetchTask(t.Context(), cfg, 0, nil); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "sends no task") {
		t.Errorf("coordinator without a task: %v", err)
	}
}

// TestRefuseTask: a site's refusal is logged and recorded by the
// coordinator with the site's name and reason.
func TestRefuseTask(t *testing.T) {
	srv, events, addr := taskServer(t, "", testTask, nil)
	cfg := SiteConfig{Addr: addr, Name: "s1", Insecure: true, Logger: quietLogger()}
	if err := RefuseTask(t.Context(), cfg, 1, "method fedpgp is not among --accept-methods pfedmma"); err != nil {
		t.Fatal(err)
	}
	ev := events.Recent()
	if len(ev) != 1 || ev[0].Site != "s1" || ev[0].Kind != "refused" || !strings.Contains(ev[0].Message, "--accept-methods pfedmma") {
		t.Errorf("events %+v, want the site's refusal with its reason", ev)
	}
	var m dto.Metric
	if err := srv.Metrics().Refused.WithLabelValues(ReasonTaskRefused).Write(&m); err != nil {
		t.Fatal(err)
	}
	if n := m.GetCounter().GetValue(); n != 1 {
		t.Errorf("refusals counted %v, want 1", n)
	}
}

// TestTaskFromProto: a malformed task is an error naming each bad field.
func TestTaskFromProto(t *testing.T) {
	if _, err := TaskFromProto(nil); err == nil || !strings.Contains(err.Error(), "no task") {
		t.Errorf("no task: %v", err)
	}
	good := testTask.toProto()
	if got, err := TaskFromProto(good); err != nil || got.ModelSHA256 != testTask.ModelSHA256 {
		t.Errorf("good task: %v", err)
	}
	for _, c := range []struct {
		field string
		edit  func(m *pb.TaskExperiment)
	}{
		{"experiment_yaml", func(m *pb.TaskExperiment) { m.ExperimentYaml = nil }},
		{"experiment_yaml", func(m *pb.TaskExperiment) { m.ExperimentYaml = make([]byte, MaxTaskBytes+1) }},
		{"model_sha256", func(m *pb.TaskExperiment) { m.ModelSha256 = "abc" }},
		{"model_sha256", func(m *pb.TaskExperiment) { m.ModelSha256 = strings.Repeat("AB", 32) }},
		{"vocab_sha256", func(m *pb.TaskExperiment) { m.VocabSha256 = "" }},
		{"fingerprint", func(m *pb.TaskExperiment) { m.Fingerprint = strings.Repeat("zz", 32) }},
		{"upload_bytes", func(m *pb.TaskExperiment) { m.UploadBytes = -1 }},
	} {
		m := testTask.toProto()
		c.edit(m)
		_, err := TaskFromProto(m)
		if err == nil || !strings.Contains(err.Error(), "task field "+c.field) || !strings.Contains(err.Error(), "malformed task") {
			t.Errorf("bad %s: %v", c.field, err)
		}
	}
}
