package report_test

import (
	"fmt"

	"github.com/pfedmma/pfedmma/eval"
	"github.com/pfedmma/pfedmma/report"
)

func ExampleSummary_Table() {
	s := &report.Summary{Protocol: "base2novel", Metrics: report.BaseToNovelMetrics}
	s.Set("PromptFL", eval.BaseToNovel(88.93, 88.95, 75.36))
	s.Set("pFedMMA", eval.BaseToNovel(97.17, 77.40, 81.49))
	t := s.Table("16 shots")
	fmt.Print(t.Text())
	fmt.Println()
	fmt.Print(t.Markdown())
	// Output:
	// 16 shots
	// Method    Local   Base  Novel     HM
	// --------  -----  -----  -----  -----
	// PromptFL  88.93  88.95  75.36  83.90
	// pFedMMA   97.17  77.40  81.49  84.55
	//
	// **16 shots**
	//
	// | Method | Local | Base | Novel | HM |
	// |:--|--:|--:|--:|--:|
	// | PromptFL | 88.93 | **88.95** | 75.36 | 83.90 |
	// | pFedMMA | **97.17** | 77.40 | **81.49** | **84.55** |
}

// A run writes its per-round log, then its summary, report and plots.
func ExampleNewMetricsLog() {
	dir := "runs/dtd-pfedmma" // e.g. the run's output directory
	log, err := report.NewMetricsLog(dir)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer log.Close()
	for round := 1; round <= 3; round++ {
		rec := report.RoundRecord{Round: round, Method: "pfedmma"}
		for id := 0; id < 2; id++ {
			rec.Clients = append(rec.Clients, report.ClientMetrics{
				ID: id, Metrics: eval.BaseToNovel(90+float64(round), 70, 75),
			})
		}
		if err := log.Append(rec); err != nil { // Mean is filled from Clients
			fmt.Println(err)
			return
		}
	}
	_ = report.LearningCurves(log.Records(), "hm").WritePNG(dir+"/curves.png", 800, 500)
}
