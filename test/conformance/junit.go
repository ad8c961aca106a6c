package main

import (
	"encoding/xml"
	"fmt"
	"io"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
)

// junitSuites is the part of e2e.test's JUnit report (junit_01.xml in its
// --report-dir) that the summary reads.
type junitSuites struct {
	Suites []struct {
		Cases []junitCase `xml:"testcase"`
	} `xml:"testsuite"`
}

type junitCase struct {
	Name    string `xml:"name,attr"`
	Status  string `xml:"status,attr"`
	Time    string `xml:"time,attr"`
	Skipped *struct {
		Message string `xml:"message,attr"`
	} `xml:"skipped"`
	Failure *struct {
		Body string `xml:",chardata"`
	} `xml:"failure"`
	Error *struct {
		Body string `xml:",chardata"`
	} `xml:"error"`
}

// A spec is one test's outcome in a shard.
type spec struct {
	Name string `json:"name"`
	SIG  string `json:"sig,omitempty"`
	// Outcome is passed, failed or skipped.
	Outcome string `json:"outcome"`
	// Reason is why a spec was skipped, or the first line of its
	// failure.
	Reason string `json:"reason,omitempty"`
}

// filteredOut is the skip message of the specs a shard's filter left
// out: they are another shard's, not skipped by this one.
const filteredOut = "skipped"

// readJUnit returns the specs a shard ran (or skipped on its own) from
// its JUnit report; the specs its filter left out are not among them.
// Ginkgo's suite nodes ([SynchronizedBeforeSuite] and the like) count
// when they failed, as every spec after them is then lost.
func readJUnit(r io.Reader) ([]spec, error) {
	var doc junitSuites
	if err := xml.NewDecoder(r).Decode(&doc); err != nil {
		return nil, fmt.Errorf("when decoding the JUnit report: %w", err)
	}
	var out []spec
	for _, s := range doc.Suites {
		for _, c := range s.Cases {
			suiteNode := isSuiteNode(c.Name)
			sp := spec{Name: strings.TrimPrefix(c.Name, "[It] "), SIG: sigOf(c.Name)}
			if suiteNode {
				sp.SIG = ""
			}
			switch {
			case c.Failure != nil || c.Error != nil || c.Status == "failed" || c.Status == "panicked" || c.Status == "timedout" || c.Status == "interrupted" || c.Status == "aborted":
				sp.Outcome = "failed"
				if c.Failure != nil {
					sp.Reason = firstLine(c.Failure.Body)
				} else if c.Error != nil {
					sp.Reason = firstLine(c.Error.Body)
				} else {
					sp.Reason = c.Status
				}
			case c.Skipped != nil || c.Status == "skipped" || c.Status == "pending":
				msg := ""
				if c.Skipped != nil {
					msg = c.Skipped.Message
				}
				if msg == filteredOut || c.Status == "pending" {
					continue
				}
				sp.Outcome = "skipped"
				sp.Reason = strings.TrimPrefix(msg, "skipped - ")
			default:
				if suiteNode {
					// A suite node that passed: not a test.
					continue
				}
				sp.Outcome = "passed"
			}
			out = append(out, sp)
		}
	}
	return out, nil
}

// readJUnitFile is readJUnit of a file.
func readJUnitFile(path string) ([]spec, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("when opening the JUnit report: %w", err)
	}
	defer f.Close()
	specs, err := readJUnit(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return specs, nil
}

// isSuiteNode says whether a JUnit test case is one of Ginkgo's suite
// nodes ([SynchronizedBeforeSuite], [ReportAfterSuite] Log Check, ...)
// rather than a spec, whose name starts with [It].
func isSuiteNode(name string) bool {
	first, _, _ := strings.Cut(name, " ")
	return strings.HasPrefix(first, "[") && strings.Contains(first, "Suite")
}

var sigTag = regexp.MustCompile(`\[(sig-[a-z-]+)\]`)

// sigOf returns the SIG a spec's name is tagged with, or "".
func sigOf(name string) string {
	m := sigTag.FindStringSubmatch(name)
	if m == nil {
		return ""
	}
	return m[1]
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}

// tally counts outcomes.
type tally struct{ Passed, Failed, Skipped int }

func (t *tally) add(outcome string) {
	switch outcome {
	case "passed":
		t.Passed++
	case "failed":
		t.Failed++
	case "skipped":
		t.Skipped++
	}
}

func (t tally) String() string {
	return fmt.Sprintf("%d passed, %d failed, %d skipped", t.Passed, t.Failed, t.Skipped)
}

// summary writes, in Markdown, the outcomes by SIG over every shard's
// specs, then the shards that did not finish (interrupted, counted as far
// as they got) and those that did not run (notRun), then each failed and
// each skipped spec with its reason.
func summary(w io.Writer, results []shardResult, notRun []string) {
	bySIG := map[string]*tally{}
	var total tally
	var failed, skipped []spec
	for _, r := range results {
		for _, s := range r.Specs {
			sig := s.SIG
			if sig == "" {
				sig = "(suite)"
			}
			if bySIG[sig] == nil {
				bySIG[sig] = &tally{}
			}
			bySIG[sig].add(s.Outcome)
			total.add(s.Outcome)
			switch s.Outcome {
			case "failed":
				failed = append(failed, s)
			case "skipped":
				skipped = append(skipped, s)
			}
		}
	}
	fmt.Fprintf(w, "| SIG | passed | failed | skipped |\n|---|---:|---:|---:|\n")
	for _, sig := range slices.Sorted(maps.Keys(bySIG)) {
		t := bySIG[sig]
		fmt.Fprintf(w, "| %s | %d | %d | %d |\n", sig, t.Passed, t.Failed, t.Skipped)
	}
	fmt.Fprintf(w, "| all | %d | %d | %d |\n", total.Passed, total.Failed, total.Skipped)
	var unfinished []string
	for _, r := range results {
		if r.Interrupted {
			unfinished = append(unfinished, fmt.Sprintf("%s (%v)", r.Shard, r.tally()))
		}
	}
	if len(unfinished) > 0 {
		fmt.Fprintf(w, "\nNot finished, counted as far as they got: %s.\n", strings.Join(unfinished, ", "))
	}
	if len(notRun) > 0 {
		fmt.Fprintf(w, "\nNot run: %s.\n", strings.Join(notRun, ", "))
	}
	for _, part := range []struct {
		title string
		specs []spec
	}{{"Failed", failed}, {"Skipped", skipped}} {
		if len(part.specs) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s:\n\n", part.title)
		slices.SortFunc(part.specs, func(a, b spec) int { return strings.Compare(a.Name, b.Name) })
		for _, s := range part.specs {
			fmt.Fprintf(w, "- %s: %s\n", s.Name, s.Reason)
		}
	}
}
