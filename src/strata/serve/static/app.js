// The Strata page: ask (stage progress streamed over server-sent events), read the answer with numbered citations,
// open a citation to see its paper, ToC path and the evidence highlighted in context; plain hybrid search.
// Everything the server sends is inserted as text, never as HTML.
"use strict";

const $ = (id) => document.getElementById(id);
const tokenKey = "strata-token";
let evidenceByNumber = new Map();

function element(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  Object.assign(node, props);
  node.append(...children);
  return node;
}

function authHeaders(extra = {}) {
  const token = sessionStorage.getItem(tokenKey);
  return token ? { ...extra, Authorization: `Bearer ${token}` } : extra;
}

async function errorText(response) {
  try {
    const body = await response.json();
    const detail = body.detail;
    if (typeof detail === "string") return detail;
    return detail.map((item) => `${item.loc.join(".")}: ${item.msg}`).join("; ");
  } catch {
    return `${response.status} ${response.statusText}`;
  }
}

async function getJson(path) {
  const response = await fetch(path, { headers: authHeaders() });
  if (!response.ok) throw new Error(await errorText(response));
  return response.json();
}

function showError(id, message) {
  $(id).textContent = message;
  $(id).hidden = !message;
}

// --- asking: POST /ask answers with a stream of `stage` events, then one `result` or `error` event

async function ask(question, options) {
  $("answer").hidden = true;
  $("stages").replaceChildren();
  showError("ask-error", "");
  const response = await fetch("/ask", {
    method: "POST",
    headers: authHeaders({ "Content-Type": "application/json", Accept: "text/event-stream" }),
    body: JSON.stringify(options.length >= 2 ? { question, options, format: "mc" } : { question }),
  });
  if (!response.ok) throw new Error(await errorText(response));
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer = (buffer + value).replace(/\r\n?/g, "\n");
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      handleEvent(parseEvent(buffer.slice(0, cut)));
      buffer = buffer.slice(cut + 2);
    }
  }
}

function parseEvent(block) {
  let event = "message";
  const data = [];
  for (const line of block.split("\n")) {
    if (!line || line.startsWith(":")) continue; // comments are keep-alive pings
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
    if (field === "event") event = value;
    if (field === "data") data.push(value);
  }
  return { event, data: data.join("\n") };
}

function handleEvent({ event, data }) {
  if (!data) return;
  const payload = JSON.parse(data);
  if (event === "stage") showStage(payload);
  else if (event === "result") showResult(payload);
  else if (event === "error") showError("ask-error", payload.detail);
}

function showStage(stage) {
  let item = $(`stage-${stage.stage}`);
  if (!item) {
    item = element("li", { id: `stage-${stage.stage}` });
    $("stages").append(item);
  }
  item.className = stage.status;
  const detail = stage.detail ? `: ${stage.detail}` : "";
  item.textContent = `${stage.stage} ${stage.status}${detail} (${stage.elapsed_s.toFixed(1)} s)`;
}

function showResult(result) {
  const answer = result.answer;
  evidenceByNumber = new Map(answer.evidence.map((evidence) => [evidence.number, evidence]));
  const flags = [];
  if (result.partial) flags.push(["partial: " + (result.error || "reading failed"), true]);
  if (!answer.answerable) flags.push(["not answerable from this corpus", true]);
  if (!answer.supported) flags.push(["not fully supported", true]);
  if (answer.dropped_claims) flags.push([`${answer.dropped_claims} claims dropped by validation`, true]);
  flags.push([`${result.wall_s.toFixed(1)} s`, false]);
  $("answer-flags").replaceChildren(
    ...flags.map(([text, warn]) => element("span", { className: warn ? "flag warn" : "flag", textContent: text })));
  const prose = answer.choice && answer.text !== answer.choice ? `${answer.choice}: ${answer.text}` : answer.text;
  $("answer-text").replaceChildren(element("p", {}, ...withCitations(prose)));
  $("answer-table").replaceChildren(...(answer.table ? [table(answer.table)] : []));
  $("claims").replaceChildren(...answer.claims.map((claim) => {
    const inText = citedIn(claim.text);
    const extra = claim.citations.filter((number) => !inText.has(number)).map(citeButton);
    return element("li", {}, ...withCitations(claim.text), ...extra);
  }));
  $("evidence").replaceChildren(...answer.evidence.map(evidenceItem));
  $("answer").hidden = false;
}

const citationMarker = /\[(\d+(?:\s*,\s*\d+)*)\]/g;

function citedIn(text) {
  return new Set([...text.matchAll(citationMarker)].flatMap((match) => match[1].split(",").map(Number)));
}

// "... as shown [1, 3]." -> text nodes and citation buttons
function withCitations(text) {
  const parts = [];
  let last = 0;
  for (const match of text.matchAll(citationMarker)) {
    parts.push(text.slice(last, match.index));
    for (const number of match[1].split(",")) parts.push(citeButton(Number(number)));
    last = match.index + match[0].length;
  }
  parts.push(text.slice(last));
  return parts;
}

function citeButton(number) {
  const button = element("button", { type: "button", className: "cite", textContent: `[${number}]` });
  button.dataset.number = number;
  button.disabled = !evidenceByNumber.has(number);
  button.addEventListener("click", () => openEvidence(number).catch((error) => showError("ask-error", error.message)));
  return button;
}

function evidenceItem(evidence) {
  const item = element("li", { value: evidence.number });
  item.append(citeButton(evidence.number), " ", element("strong", { textContent: evidence.title || evidence.paper_id }),
    element("div", { className: "muted", textContent: evidence.section_path.join(" › ") || "—" }),
    element("div", { className: "snippet", textContent: evidence.quote || snippet(evidence.text) }));
  return item;
}

function table(rows) {
  const [header, ...body] = rows;
  return element("table", {},
    element("thead", {}, element("tr", {}, ...header.map((cell) => element("th", { textContent: cell })))),
    element("tbody", {}, ...body.map((row) =>
      element("tr", {}, ...row.map((cell) => element("td", { textContent: cell }))))));
}

function snippet(text, width = 240) {
  const flat = text.replace(/\s+/g, " ").trim();
  return flat.length <= width ? flat : flat.slice(0, width - 1) + "…";
}

async function openEvidence(number) {
  const evidence = evidenceByNumber.get(number);
  for (const button of document.querySelectorAll("button.cite")) {
    button.classList.toggle("active", Number(button.dataset.number) === number);
  }
  await showPassage(evidence.locator, evidence.quote);
}

// --- the detail panel: a passage in its paper (from /locate) and the paper's ToC (from /papers)

async function showPassage(locator, quote = "") {
  const located = await getJson(`/locate/${encodeURIComponent(locator)}?context=600`);
  const paper = await getJson(`/papers/${encodeURIComponent(located.paper_id)}`);
  $("detail-title").textContent = paper.title || paper.id;
  const where = [located.section_path.join(" › ") || "no section", located.page ? `page ${located.page}` : "",
    located.locator].filter(Boolean);
  $("detail-where").textContent = where.join(" · ");
  const mark = element("mark", { className: "evidence" }, ...highlightQuote(located.text, quote));
  $("detail-context").replaceChildren(located.before ? "…" + located.before : "", mark,
    located.after ? located.after + "…" : "");
  $("toc").replaceChildren(tocList(paper.sections, located.section_path));
  $("detail").hidden = false;
  scrollWithin($("detail-context"), mark);
  const current = $("toc").querySelector(".current");
  if (current) scrollWithin($("toc"), current);
}

// Scroll a box (not the page) so that `target` sits in its upper part; both boxes are positioned, so offsetTop
// is measured from the box.
function scrollWithin(box, target) {
  box.scrollTop = Math.max(0, target.offsetTop - box.clientHeight / 4);
}

function highlightQuote(text, quote) {
  const at = quote ? text.indexOf(quote) : -1;
  if (at < 0) return [text];
  const highlighted = element("span", { className: "quote", textContent: quote });
  return [text.slice(0, at), highlighted, text.slice(at + quote.length)];
}

function tocList(sections, path) {
  return element("ul", {}, ...sections.map((section) => {
    const onPath = section.path.length <= path.length && section.path.every((title, i) => title === path[i]);
    const current = onPath && section.path.length === path.length;
    const label = [section.number, section.title].filter(Boolean).join(" ");
    const item = element("li", { className: current ? "current" : onPath ? "on-path" : "" },
      element("span", { textContent: label }));
    if (section.children.length) item.append(tocList(section.children, path));
    return item;
  }));
}

// --- plain hybrid search

async function search(query) {
  showError("search-error", "");
  const ranking = await getJson(`/search?q=${encodeURIComponent(query)}&k=10`);
  if (!ranking.candidates.length) {
    $("results").replaceChildren(element("li", { className: "muted", textContent: "no results" }));
    return;
  }
  $("results").replaceChildren(...ranking.candidates.map((candidate) => element("li", {},
    element("strong", { textContent: candidate.title || candidate.paper_id }),
    element("span", { className: "muted", textContent: ` ${ranking.method} ${candidate.score.toFixed(4)}` }),
    element("ul", {}, ...candidate.chunks.map((hit) => {
      const locator = `${hit.locator.paper_id}#${hit.locator.char_start}-${hit.locator.char_end}`;
      const open = element("button", { type: "button", className: "link", textContent: snippet(hit.text, 200) });
      open.addEventListener("click",
        () => showPassage(locator).catch((error) => showError("search-error", error.message)));
      const where = `${hit.locator.section_path.join(" › ") || "—"} · ${locator}`;
      return element("li", {}, open, element("div", { className: "locator", textContent: where }));
    })))));
}

// --- wiring

async function busy(button, work, errorId) {
  button.disabled = true;
  try {
    await work();
  } catch (error) {
    showError(errorId, error.message);
  } finally {
    button.disabled = false;
  }
}

document.addEventListener("DOMContentLoaded", async () => {
  $("ask-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const options = $("options").value.split("\n").map((line) => line.trim()).filter(Boolean);
    busy($("ask-button"), () => ask($("question").value.trim(), options), "ask-error");
  });
  $("search-form").addEventListener("submit", (event) => {
    event.preventDefault();
    busy(event.submitter, () => search($("query").value.trim()), "search-error");
  });
  $("token").value = sessionStorage.getItem(tokenKey) || "";
  $("token").addEventListener("change", () => sessionStorage.setItem(tokenKey, $("token").value));
  const health = await getJson("/health");
  $("token-box").hidden = !health.auth;
  $("corpus").textContent = `${health.corpus.papers} papers · ${health.corpus.chunks} chunks`;
});
