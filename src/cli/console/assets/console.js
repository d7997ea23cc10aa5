// warden console: the page. No framework, no build step; every value from
// the server is placed with textContent, never parsed as HTML.
'use strict';

const fragment = new URLSearchParams(location.hash.slice(1));
const token = fragment.get('token') || sessionStorage.getItem('warden-console-token') || '';
if (fragment.get('token')) {
  sessionStorage.setItem('warden-console-token', token);
  history.replaceState(null, '', location.pathname); // the token leaves the address bar
}
const $ = (id) => document.getElementById(id);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === 'class') e.className = v;
    else if (k.startsWith('data-')) e.setAttribute(k, v);
    else e[k] = v;
  }
  for (const c of children) if (c !== null && c !== undefined) e.append(c instanceof Node ? c : String(c));
  return e;
}

async function api(path, body) {
  const init = { headers: { Authorization: 'Bearer ' + token }, cache: 'no-store' };
  if (body !== undefined) {
    init.method = 'POST';
    init.headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  const r = await fetch(path, init);
  const text = await r.text();
  if (!r.ok) throw new Error(r.status + ': ' + text);
  return JSON.parse(text);
}

function cut(s, n) { s = String(s); return s.length > n ? s.slice(0, n) + '…' : s; }
function time(ts) { return ts ? String(ts).replace(/^.*T/, '').replace(/\..*$|Z$/, '') : ''; }

let timers = new Map();
// `f` once, shortly, however many times it is asked for meanwhile.
function soon(f) {
  if (!timers.has(f)) timers.set(f, setTimeout(() => { timers.delete(f); f(); }, 500));
}

// ---- calls --------------------------------------------------------------
const calls = new Map();
const MAX_ROWS = 500;

function row(id) {
  let tr = calls.get(id);
  if (!tr) {
    tr = el('tr', { 'data-call-id': id },
      el('td', { class: 'time' }), el('td', { class: 'tool' }), el('td', { class: 'args' }),
      el('td', { class: 'status' }), el('td', { class: 'ms' }), el('td', { class: 'details' }));
    calls.set(id, tr);
    $('calls-body').prepend(tr);
    while (calls.size > MAX_ROWS) {
      const last = $('calls-body').lastElementChild;
      calls.delete(last.getAttribute('data-call-id'));
      last.remove();
    }
  }
  return tr;
}

function sandbox(sb) {
  if (!sb) return '';
  const parts = [sb.runtime];
  if (sb.landlock_abi) parts.push('landlock ' + sb.landlock_abi);
  if (sb.seccomp) parts.push('seccomp');
  if (sb.uid !== undefined && sb.uid !== null) parts.push('uid ' + sb.uid);
  const dirs = sb.dirs || [];
  const rw = dirs.filter((d) => d.endsWith('(rw)') && !d.startsWith('/dev/'));
  if (dirs.length) parts.push(dirs.length + ' dirs' + (rw.length ? ', writable: ' + rw.map((d) => d.replace(/ \(rw\)$/, '')).join(', ') : ', none writable'));
  parts.push(sb.net && sb.net.length ? 'net: ' + sb.net.join(', ') : 'no network');
  return parts.join(' · ');
}

function network(n) {
  if (!n) return [];
  const out = ['network: ' + (n.allowed || 0) + ' allowed, ' + (n.refused || 0) + ' refused'];
  for (const a of n.attempts || []) {
    const where = JSON.stringify(a.host) + ':' + a.port;
    out.push((a.allowed ? '  → ' : '  ✗ ') + where + (a.allowed ? '' : ' refused: ' + (a.reason || '')) +
      (a.intercepted ? ' [intercepted]' : ''));
    for (const c of a.credentials || []) {
      out.push('      credential ' + c.name + ': ' + c.substituted + ' substituted' +
        (c.misdirected ? ', ' + c.misdirected + ' placeholder(s) sent where no bind covers them, not substituted' : ''));
    }
    if (a.redacted) out.push('      ' + a.redacted + ' real value(s) in responses replaced by placeholders');
  }
  return out;
}

let lastVerify = 0;
let verifySoon = false;

function onRecord(r) {
  if (!r.call_id) return;
  // The chain's verdict follows new records, at most every 30 s (it reads the whole log).
  if (!verifySoon) {
    verifySoon = true;
    setTimeout(() => { verifySoon = false; verify(); }, Math.max(500, 30000 - (Date.now() - lastVerify)));
  }
  const tr = row(r.call_id);
  const status = r.decision === 'denied' ? 'denied' : r.decision === 'approval_required' ? 'approval required' : r.status;
  tr.setAttribute('data-status', r.status || '');
  tr.classList.toggle('denied', r.decision === 'denied' || r.decision === 'approval_required');
  tr.querySelector('.time').textContent = time(r.ts);
  tr.querySelector('.tool').textContent = r.tool;
  tr.querySelector('.args').textContent = cut(JSON.stringify(r.args), 300);
  tr.querySelector('.status').textContent = status + (r.error_code ? ' ' + r.error_code : '');
  tr.querySelector('.ms').textContent = r.status === 'running' ? '' : Math.round(r.duration_ms || 0);
  const details = [];
  if (r.tier) details.push('tier ' + r.tier + (r.rule ? ' (' + r.rule + ')' : ''));
  const a = r.approval;
  if (a && a.who && r.approved_by === 'lasting') {
    details.push('approved by lasting approval ' + a.id + ' (given by ' + a.who + ' via ' + a.via + ')');
  } else if (a && a.who) {
    details.push((r.status === 'rejected' ? 'rejected' : 'approved') + ' by ' + a.who + ' via ' + a.via + ' (' + a.id + ')');
  } else if (r.approved_by && r.approved_by !== 'auto') details.push('approved by ' + r.approved_by);
  if (r.decision === 'denied' && r.rule) details.push('to change: the policy line ' + r.rule);
  if (r.exit) details.push('exit ' + JSON.stringify(r.exit));
  const sb = sandbox(r.sandbox);
  if (sb) details.push(sb);
  details.push(...network(r.network));
  details.push(...(why.get(r.call_id) || []));
  tr.querySelector('.details').textContent = details.join('\n');
  tr.querySelector('.details').title = (r.sandbox?.dirs || []).join('\n');
  tr.querySelector('.details').style.whiteSpace = 'pre-wrap';
}

// What events say of a call beyond its record: a refusal's message and the
// hints naming the policy key to change (`{"kind": "call_end", "call_id",
// "message", "hints": […]}`, when the process sends them).
const why = new Map();

function onEvent(e) {
  if (e.kind === 'definition_refused') { soon(definitions); return; }
  if (e.call_id && (e.message || e.hints)) {
    const lines = [];
    if (e.message) lines.push('why: ' + e.message);
    for (const h of e.hints || []) lines.push('hint: ' + h);
    why.set(e.call_id, lines);
    if (why.size > MAX_ROWS) why.delete(why.keys().next().value);
    const tr = calls.get(e.call_id);
    if (tr) tr.querySelector('.details').textContent += '\n' + lines.join('\n');
  }
  if (e.kind !== 'call_start' || !e.call_id) return;
  const known = calls.get(e.call_id);
  if (known && known.getAttribute('data-status')) return; // its record came first
  const tr = row(e.call_id);
  tr.setAttribute('data-status', 'running');
  tr.querySelector('.time').textContent = new Date(e.ts_ms).toISOString().replace(/^.*T|\..*$/g, '');
  tr.querySelector('.tool').textContent = e.tool;
  tr.querySelector('.args').textContent = cut(JSON.stringify(e.args), 300);
  tr.querySelector('.status').textContent = 'running';
  tr.querySelector('.details').textContent = 'pid ' + e.pid + (e.session ? ' · session ' + e.session : '');
}

// ---- approvals ------------------------------------------------------------
function diffBlock(text) {
  const pre = el('pre', { class: 'diff' });
  for (const line of String(text || '').split('\n')) {
    const cls = /^\+(?!\+\+)/.test(line) ? 'add' : /^-(?!--)/.test(line) ? 'del' : 'same';
    pre.append(el('span', { class: cls }, line));
  }
  return pre;
}

async function answer(p, kind, reason, msg, scope) {
  msg.textContent = 'sending…';
  const body = { id: p.id, args_sha256: p.args_sha256, answer: kind, reason: reason.value || null };
  if (kind === 'always') {
    const [match, where] = scope.value.split(' ');
    body.lasting = { match, scope: where };
  }
  try {
    await api('/api/answer', body);
    msg.textContent = 'answered: ' + kind + ' (the waiting call continues)';
  } catch (e) { msg.textContent = 'refused: ' + e.message; }
}

function onInbox(list) {
  $('approvals-count').textContent = list.length;
  $('approvals-empty').hidden = list.length > 0;
  const box = $('approvals-list');
  const keep = new Set(list.map((p) => p.id));
  for (const card of [...box.children]) if (!keep.has(card.getAttribute('data-id'))) card.remove();
  for (const p of list) {
    if (box.querySelector('[data-id="' + CSS.escape(p.id) + '"]')) continue;
    const reason = el('input', { placeholder: 'reason (optional)', class: 'reason' });
    const msg = el('span', { class: 'muted msg' }, p.answered ? 'answered; waiting for the process' : '');
    // What "always" keeps approving: these arguments or every call (ask tools only), here or this session.
    const scope = el('select', { class: 'scope', title: 'what Always keeps approving' },
      el('option', { value: 'args workspace' }, 'these arguments, in this workspace'),
      el('option', { value: 'args session' }, 'these arguments, this session'),
      p.tier === 'ask' ? el('option', { value: 'tool workspace' }, 'every call of ' + p.tool + ', in this workspace') : null,
      p.tier === 'ask' ? el('option', { value: 'tool session' }, 'every call of ' + p.tool + ', this session') : null);
    const button = (kind, label, cls) => {
      const b = el('button', { type: 'button', class: cls + ' ' + kind }, label);
      b.addEventListener('click', () => answer(p, kind, reason, msg, scope));
      return b;
    };
    const left = p.expires_ms ? Math.max(0, Math.round((p.expires_ms - Date.now()) / 1000)) + ' s left' : '';
    box.append(el('div', { class: 'card', 'data-id': p.id },
      el('h3', {}, p.tool + ' ', el('span', { class: 'badge' }, p.tier), ' ', el('span', { class: 'muted' }, left)),
      el('div', { class: 'muted' }, [p.location, p.client, p.session, 'pid ' + p.pid].filter(Boolean).join(' · ')),
      el('pre', { class: 'args-text' }, p.args_text || JSON.stringify(p.args, null, 2)),
      p.preview ? diffBlock(p.preview) : null,
      el('div', { class: 'actions' }, button('approve', 'Approve', 'approve'), button('reject', 'Reject', 'reject'),
        button('always', 'Always', 'approve'), scope, reason, msg)));
  }
}

// ---- the feed -------------------------------------------------------------
function dispatch(chunk) {
  let kind = 'message';
  const data = [];
  for (const line of chunk.split('\n')) {
    if (line.startsWith('event: ')) kind = line.slice(7);
    else if (line.startsWith('data: ')) data.push(line.slice(6));
  }
  if (!data.length) return;
  const v = JSON.parse(data.join('\n'));
  if (kind === 'record') onRecord(v);
  else if (kind === 'event') onEvent(v);
  else if (kind === 'inbox') onInbox(v);
  else if (kind === 'hello') $('logpath').textContent = v.log;
}

async function feed() {
  for (;;) {
    try {
      // fetch, not EventSource: it can send the token as a header.
      const r = await fetch('/api/feed', { headers: { Authorization: 'Bearer ' + token }, cache: 'no-store' });
      if (!r.ok) throw new Error(r.status + ' ' + (await r.text()));
      $('conn').textContent = 'live';
      $('conn').className = 'badge on';
      const reader = r.body.getReader();
      const dec = new TextDecoder();
      let buf = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += dec.decode(value, { stream: true });
        let i;
        while ((i = buf.indexOf('\n\n')) >= 0) {
          dispatch(buf.slice(0, i));
          buf = buf.slice(i + 2);
        }
      }
    } catch (e) {
      $('conn').textContent = 'disconnected: ' + cut(e.message, 80);
    }
    $('conn').className = 'badge off';
    await sleep(1000);
  }
}

// ---- jobs -----------------------------------------------------------------
let following = null; // {pid, job, offset}
let lastJobs = '';

async function followOutput() {
  if (!following) return;
  const f = following;
  try {
    const v = await api('/api/jobs/output', { pid: f.pid, job: f.job, offset: f.offset });
    if (following !== f) return;
    if (v.error) { $('job-output').textContent += '\n[' + v.error + ']'; following = null; return; }
    $('job-output').textContent += v.output || '';
    f.offset = v.next_offset;
    if (v.eof) { $('job-output').textContent += '\n[' + v.status + ']'; following = null; }
  } catch (e) { $('job-output').textContent += '\n[' + e.message + ']'; following = null; }
}

async function jobs() {
  let procs = [];
  try { procs = await api('/api/jobs'); } catch (e) { return; }
  const seen = JSON.stringify(procs.map((p) => (p.jobs || []).map((j) => [p.pid, j.job, j.status, j.output_bytes])));
  if (seen === lastJobs) return; // unchanged: the buttons stay where they are
  lastJobs = seen;
  const body = $('jobs-body');
  body.textContent = '';
  let n = 0;
  for (const p of procs) {
    for (const j of p.jobs || []) {
      n++;
      const follow = el('button', { type: 'button', class: 'follow' }, 'Follow output');
      follow.addEventListener('click', () => {
        following = { pid: p.pid, job: j.job, offset: 0 };
        $('job-output').hidden = false;
        $('job-output').textContent = '';
      });
      const cancel = el('button', { type: 'button', class: 'reject cancel', disabled: j.status !== 'running' }, 'Cancel');
      cancel.addEventListener('click', async () => {
        cancel.disabled = true;
        try { await api('/api/jobs/cancel', { pid: p.pid, job: j.job }); } catch (e) { alert(e.message); }
        jobs();
      });
      body.append(el('tr', { 'data-job': j.job, 'data-status': j.status },
        el('td', {}, 'pid ' + p.pid), el('td', {}, j.tool), el('td', { class: 'status' }, j.status),
        el('td', { class: 'muted' }, j.job + ' · ' + j.owner + ' · ' + j.output_bytes + ' bytes'),
        el('td', {}, follow, ' ', cancel)));
    }
  }
  $('jobs-empty').hidden = n > 0;
}

// ---- definitions ----------------------------------------------------------
function diffLines(pairs) {
  const pre = el('pre', { class: 'diff' });
  for (const [sign, text] of pairs || []) {
    pre.append(el('span', { class: sign === '+' ? 'add' : sign === '-' ? 'del' : 'same' }, sign + ' ' + text));
  }
  return pre;
}

async function definitions() {
  $('defs-status').textContent = 'checking (the policy\'s servers and plugins are asked)…';
  let v;
  try { v = await api('/api/definitions'); } catch (e) { $('defs-status').textContent = e.message; return; }
  const list = $('defs-list');
  list.textContent = '';
  if (!v.exists) { $('defs-status').textContent = v.lock + ' does not exist: nothing is pinned.'; return; }
  $('defs-status').textContent = v.changes.length ? v.changes.length + ' change(s) since ' + v.lock : 'Every definition matches ' + v.lock + '.';
  const owners = new Map();
  for (const c of v.changes) {
    if (!owners.has(c.owner)) owners.set(c.owner, []);
    owners.get(c.owner).push(c);
  }
  for (const [owner, changes] of owners) {
    const msg = el('span', { class: 'muted msg' });
    const accept = el('button', { type: 'button', class: 'approve accept' }, 'Accept (warden lock for ' + owner + ')');
    const keep = el('button', { type: 'button', class: 'reject keep' }, 'Keep refusing');
    const card = el('div', { class: 'card', 'data-owner': owner }, el('h3', {}, owner));
    for (const c of changes) {
      card.append(el('div', {}, el('strong', {}, c.what + ' '), c.key));
      if (c.poisoning) card.append(el('div', { class: 'bad' }, 'POISONING: ' + c.poisoning));
      if (c.description) card.append(el('div', { class: 'muted' }, 'description'), diffLines(c.description));
      if (c.input_schema) card.append(el('div', { class: 'muted' }, 'input schema'), diffLines(c.input_schema));
    }
    accept.addEventListener('click', async () => {
      msg.textContent = 'accepting…';
      try {
        const r = await api('/api/definitions/accept', { owner });
        msg.textContent = r.accepted ? 'accepted: ' + r.lock + ' rewritten' : 'refused: ' + r.refused.join('; ');
        if (r.accepted) setTimeout(definitions, 300);
      } catch (e) { msg.textContent = e.message; }
    });
    keep.addEventListener('click', () => card.remove());
    card.append(el('div', { class: 'actions' }, accept, keep, msg));
    list.append(card);
  }
}

// ---- search ---------------------------------------------------------------
async function verify() {
  lastVerify = Date.now();
  try {
    const v = await api('/api/verify');
    $('verdict').textContent = v.ok ? 'log chain intact (' + v.records + ')' : 'log chain BROKEN';
    $('verdict').className = 'badge ' + (v.ok ? 'good' : 'bad');
    $('verify-lines').textContent = v.lines.join('\n');
  } catch (e) { $('verdict').textContent = e.message; }
}

async function search(ev) {
  if (ev) ev.preventDefault();
  const q = { text: $('q-text').value, tool: $('q-tool').value, status: $('q-status').value };
  const body = $('search-body');
  body.textContent = '';
  try {
    const v = await api('/api/search', q);
    for (const r of v.records) {
      body.append(el('tr', { 'data-call-id': r.call_id || '' }, el('td', {}, r.ts), el('td', {}, r.tool),
        el('td', { class: 'status' }, (r.status || '') + (r.error_code ? ' ' + r.error_code : '')),
        el('td', { class: 'args' }, cut(JSON.stringify(r.args), 300))));
    }
    body.prepend(el('tr', {}, el('td', { class: 'muted', colSpan: 4 },
      v.records.length + ' match(es) in ' + v.scanned + ' record(s)' + (v.partial ? ' (the log\'s end)' : ''))));
  } catch (e) { body.append(el('tr', {}, el('td', {}, e.message))); }
  verify();
}

window.addEventListener('DOMContentLoaded', () => {
  if (!token) {
    $('conn').textContent = 'no token: open the address `warden console` printed';
    return;
  }
  $('search-form').addEventListener('submit', search);
  $('defs-check').addEventListener('click', definitions);
  feed();
  jobs();
  setInterval(jobs, 1000);
  setInterval(followOutput, 300);
  definitions();
  verify();
});
