// Command bapstreambench measures event delivery for `make bench`: it opens N Server-Sent Events
// subscribers on the all-tasks stream, drives create_task from concurrent writers (at a fixed
// event rate, or as fast as they can), and prints one JSON line with the delivered events per
// second and the commit-to-delivery latency.
//
//	bapstreambench -url http://127.0.0.1:7777 -subscribers 10 -rate 500 -duration 20s
//
// The commit of a command happens between the moment its request is sent and the moment its
// response arrives, and the server does not say when; so each event's latency is reported twice:
// from the response (a lower bound; an event that arrives before the response counts 0) and from
// the request (an upper bound, which includes the command's own execution). Every subscriber must
// receive every event of the tasks created in the window exactly once: missing and duplicate
// counts are part of the result. It measures; it never judges.
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

const createTaskBody = `{"goal":"stream bench","policy":{"allowed_origins":["https://shop.example.com"]}}`

// eventsPerCreate is how many events one create_task commits (task.created, command.recorded,
// task.state_changed, receipt.issued).
const eventsPerCreate = 4

type result struct {
	Mode          string  `json:"mode"`
	Subscribers   int     `json:"subscribers"`
	TargetRate    float64 `json:"target_events_per_s,omitempty"`
	DurationS     float64 `json:"duration_s"`
	Commands      int     `json:"commands"`
	CommandErrors int     `json:"command_errors"`
	EventsPerS    float64 `json:"events_per_s"`
	DeliveredPerS float64 `json:"delivered_per_s"`
	Expected      int     `json:"expected_per_subscriber"`
	Missing       int     `json:"missing"`
	Duplicates    int     `json:"duplicates"`
	FromRespP50ms float64 `json:"from_response_p50_ms"`
	FromRespP90ms float64 `json:"from_response_p90_ms"`
	FromRespP99ms float64 `json:"from_response_p99_ms"`
	FromRespMaxMs float64 `json:"from_response_max_ms"`
	// FromRespHist counts deliveries by latency from the response: bucket i holds those at most
	// histBounds[i] ms (the last, "inf", the rest).
	FromRespHist  map[string]int `json:"from_response_histogram_ms"`
	FromSendP50ms float64        `json:"from_request_p50_ms"`
	FromSendP90ms float64        `json:"from_request_p90_ms"`
	FromSendP99ms float64        `json:"from_request_p99_ms"`
	FromSendMaxMs float64        `json:"from_request_max_ms"`
	CommandP50ms  float64        `json:"command_p50_ms"`
	CommandP99ms  float64        `json:"command_p99_ms"`
}

// command is one create_task the writers sent in the measured window.
type command struct {
	sent, answered time.Time
}

type arrival struct {
	task string
	at   time.Time
}

// inbox is what one subscriber received; its own lock keeps subscribers from waiting on each other.
type inbox struct {
	mu       sync.Mutex
	arrivals []arrival
	perTask  map[string]int
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bapstreambench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	baseURL := fs.String("url", "http://127.0.0.1:7777", "base URL of the server")
	subscribers := fs.Int("subscribers", 10, "SSE subscribers of /bap/v1/events/stream")
	rate := fs.Float64("rate", 500, "target events per second (0: as fast as the writers go)")
	writers := fs.Int("writers", 16, "concurrent create_task writers")
	duration := fs.Duration("duration", 15*time.Second, "measured time")
	warmup := fs.Duration("warmup", 2*time.Second, "unmeasured time before it")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: *writers + *subscribers,
		DialContext: (&net.Dialer{Timeout: 5 * time.Second}).DialContext}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var mu sync.Mutex // guards measured while the writers run
	// Subscribers first, from now on.
	inboxes := make([]*inbox, *subscribers)
	for i := range inboxes {
		inboxes[i] = &inbox{perTask: map[string]int{}}
	}
	var ready sync.WaitGroup
	var subs sync.WaitGroup
	for i := 0; i < *subscribers; i++ {
		ready.Add(1)
		subs.Add(1)
		go func() {
			defer subs.Done()
			if err := subscribe(ctx, hc, *baseURL, &ready, inboxes[i]); err != nil && ctx.Err() == nil {
				fmt.Fprintln(stderr, "bapstreambench: subscriber:", err)
				os.Exit(1)
			}
		}()
	}
	ready.Wait()

	measured := map[string]command{}
	var errs atomic.Int64
	start := time.Now()
	windowStart, windowEnd := start.Add(*warmup), start.Add(*warmup+*duration)

	tokens := make(chan struct{}, 4096)
	if *rate > 0 {
		go pace(ctx, tokens, *rate/eventsPerCreate, windowEnd)
	} else {
		close(tokens)
	}
	var wg sync.WaitGroup
	for w := 0; w < *writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(windowEnd) {
				if *rate > 0 {
					if _, ok := <-tokens; !ok {
						return
					}
				}
				sent := time.Now()
				id, err := createTask(ctx, hc, *baseURL)
				answered := time.Now()
				if !sent.Before(windowStart) && sent.Before(windowEnd) {
					if err != nil {
						errs.Add(1)
						continue
					}
					mu.Lock()
					measured[id] = command{sent: sent, answered: answered}
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	// Let the last events arrive: until every subscriber has every measured event, or 10 s.
	want := len(measured) * eventsPerCreate
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if allArrived(inboxes, measured) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	subs.Wait()

	res := result{Mode: "paced", Subscribers: *subscribers, TargetRate: *rate, DurationS: duration.Seconds(),
		Commands: len(measured), CommandErrors: int(errs.Load()), Expected: want}
	if *rate == 0 {
		res.Mode = "max"
	}
	res.EventsPerS = float64(want) / duration.Seconds()
	var fromResp, fromSend, cmdLat []float64
	delivered := 0
	for _, c := range measured {
		cmdLat = append(cmdLat, ms(c.answered.Sub(c.sent)))
	}
	for _, in := range inboxes {
		per := map[string]int{}
		for _, a := range in.arrivals {
			c, ok := measured[a.task]
			if !ok {
				continue
			}
			per[a.task]++
			delivered++
			fromResp = append(fromResp, math.Max(0, ms(a.at.Sub(c.answered))))
			fromSend = append(fromSend, ms(a.at.Sub(c.sent)))
		}
		for task := range measured {
			n := per[task]
			if n < eventsPerCreate {
				res.Missing += eventsPerCreate - n
			} else if n > eventsPerCreate {
				res.Duplicates += n - eventsPerCreate
			}
		}
	}
	res.DeliveredPerS = float64(delivered) / duration.Seconds()
	res.FromRespP50ms, res.FromRespP90ms, res.FromRespP99ms, res.FromRespMaxMs = pct(fromResp, 50), pct(fromResp, 90), pct(fromResp, 99), pct(fromResp, 100)
	res.FromRespHist = histogram(fromResp)
	res.FromSendP50ms, res.FromSendP90ms, res.FromSendP99ms, res.FromSendMaxMs = pct(fromSend, 50), pct(fromSend, 90), pct(fromSend, 99), pct(fromSend, 100)
	res.CommandP50ms, res.CommandP99ms = pct(cmdLat, 50), pct(cmdLat, 99)
	out, _ := json.Marshal(res)
	fmt.Fprintln(stdout, string(out))
	return 0
}

// allArrived reports whether every subscriber has every event of the measured commands (called
// once the writers are done, so measured no longer changes).
func allArrived(inboxes []*inbox, measured map[string]command) bool {
	for _, in := range inboxes {
		in.mu.Lock()
		for task := range measured {
			if in.perTask[task] < eventsPerCreate {
				in.mu.Unlock()
				return false
			}
		}
		in.mu.Unlock()
	}
	return true
}

// pace puts perSecond tokens a second into tokens, on a fixed schedule, until end.
func pace(ctx context.Context, tokens chan<- struct{}, perSecond float64, end time.Time) {
	defer close(tokens)
	interval := time.Duration(float64(time.Second) / perSecond)
	next := time.Now()
	for next.Before(end) {
		if d := time.Until(next); d > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(d):
			}
		}
		select {
		case tokens <- struct{}{}:
		default: // the writers are behind: the achieved rate shows it
		}
		next = next.Add(interval)
	}
}

func subscribe(ctx context.Context, hc *http.Client, base string, ready *sync.WaitGroup, in *inbox) error {
	once := sync.OnceFunc(ready.Done)
	defer once()
	req, _ := http.NewRequestWithContext(ctx, "GET", base+"/bap/v1/events/stream", nil)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	br := bufio.NewReaderSize(resp.Body, 1<<16)
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return err
		}
		if bytes.HasPrefix(line, []byte(": stream open")) {
			once()
			continue
		}
		data, ok := bytes.CutPrefix(line, []byte("data: "))
		if !ok {
			continue
		}
		at := time.Now()
		var e struct {
			TaskID string `json:"task_id"`
		}
		if json.Unmarshal(data, &e) == nil {
			in.mu.Lock()
			in.arrivals = append(in.arrivals, arrival{task: e.TaskID, at: at})
			in.perTask[e.TaskID]++
			in.mu.Unlock()
		}
	}
}

func createTask(ctx context.Context, hc *http.Client, base string) (string, error) {
	var k [16]byte
	_, _ = rand.Read(k[:])
	req, _ := http.NewRequestWithContext(ctx, "POST", base+"/bap/v1/tasks", strings.NewReader(createTaskBody))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", hex.EncodeToString(k[:]))
	resp, err := hc.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 201 {
		return "", fmt.Errorf("status %d", resp.StatusCode)
	}
	var body struct {
		Task struct {
			TaskID string `json:"task_id"`
		} `json:"task"`
	}
	if err := json.Unmarshal(raw, &body); err != nil {
		return "", err
	}
	return body.Task.TaskID, nil
}

// histBounds are the histogram's bucket bounds in ms.
var histBounds = []float64{1, 2, 5, 10, 20, 50, 100, 200, 500}

// histogram counts v into histBounds' buckets, keyed "≤<bound>" and "inf".
func histogram(v []float64) map[string]int {
	h := map[string]int{}
	for _, x := range v {
		i := sort.SearchFloat64s(histBounds, x) // first bound >= x
		if i == len(histBounds) {
			h["inf"]++
		} else {
			h["le_"+strconv.FormatFloat(histBounds[i], 'f', -1, 64)]++
		}
	}
	return h
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func pct(v []float64, p float64) float64 {
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	i := int(math.Ceil(p/100*float64(len(v)))) - 1
	i = max(0, min(i, len(v)-1))
	return math.Round(v[i]*1000) / 1000
}
