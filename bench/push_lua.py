# bench/push_lua.py SECRET IDS: prints the wrk script bench/wrk.sh and
# bench/floor.sh post with: one signed ~1.8 KiB GitHub push, a unique
# X-GitHub-Delivery per request (IDS: random or sequential), and a done()
# hook that prints "RESULT requests req/s p50 p99 p99.9 errors" (ms).
import hashlib, hmac, json, sys
body = json.dumps({
    "ref": "refs/heads/main", "before": "0" * 40, "after": "1" * 40,
    "repository": {"id": 1, "full_name": "acme/widgets", "name": "widgets",
                   "private": False, "owner": {"login": "acme", "id": 2}},
    "pusher": {"name": "dev", "email": "dev@example.com"},
    "commits": [{"id": "%040d" % i, "message": "commit %d " % i + "x" * 200,
                 "author": {"name": "Dev", "email": "dev@example.com"},
                 "url": "https://github.com/acme/widgets/commit/%d" % i}
                for i in range(4)],
}, separators=(",", ":"))
sig = "sha256=" + hmac.new(sys.argv[1].encode(), body.encode(), hashlib.sha256).hexdigest()
# Random: the leading random digits place the id in the index, the count
# keeps it unique. Sequential: the count alone orders them.
ids = {
    "random": 'string.format("%08x-%04x-4%03x-a%03x-%012x", math.random(0, 0x7fffffff),'
              ' math.random(0, 0xffff), math.random(0, 0xfff), math.random(0, 0xfff), n)',
    "sequential": "prefix .. n",
}[sys.argv[2]]
print('''wrk.method = "POST"
wrk.body = %s
wrk.headers["Content-Type"] = "application/json"
wrk.headers["X-GitHub-Event"] = "push"
wrk.headers["X-Hub-Signature-256"] = "%s"
local n = 0
local prefix = tostring(os.time()) .. "-" .. tostring(math.random(1000000000)) .. "-"
math.randomseed(os.time())
request = function()
  n = n + 1
  wrk.headers["X-GitHub-Delivery"] = %s
  return wrk.format()
end
done = function(summary, latency, requests)
  local bad = summary.errors.status + summary.errors.connect + summary.errors.read
            + summary.errors.write + summary.errors.timeout
  io.write(string.format("RESULT %%d %%.1f %%.3f %%.3f %%.3f %%d\\n",
    summary.requests, summary.requests / (summary.duration / 1e6),
    latency:percentile(50) / 1000, latency:percentile(99) / 1000,
    latency:percentile(99.9) / 1000, bad))
end''' % (json.dumps(body), sig, ids))
