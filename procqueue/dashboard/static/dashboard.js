// procqueue dashboard: keeps the server-rendered page live by polling its
// JSON twin (body[data-poll]) and filling the same markup from it.
//
// Markup conventions (shared with the Jinja templates):
//   data-f="key"           textContent = value (never innerHTML)
//   data-a="attr:key ..."  setAttribute(attr, value); href/action must be local paths
//   data-w="key"           style.width = value%
//   data-show="key"        hidden unless value is truthy
//   data-rows="key"        container of rows keyed by data-key, new rows cloned
//                          from <template id=data-template>
//   data-chart="key"       SVG bar chart updated from a list of bar geometries
"use strict";

(() => {
  const body = document.body;
  const csrf = document.querySelector('meta[name="csrf-token"]')?.content ?? "";
  const interval = Math.max(100, Number(body.dataset.interval) || 1000);
  const live = document.getElementById("live");
  const toast = document.getElementById("toast");
  const has = (data, key) => Object.prototype.hasOwnProperty.call(data, key);
  const str = (value) => (value === null || value === undefined ? "" : String(value));
  const localPath = /^\/(?!\/)[^\\]*$/;

  function nodes(root, selector, top) {
    const found = Array.from(root.querySelectorAll(selector));
    if (root.matches(selector)) found.unshift(root);
    return top ? found.filter((n) => !n.parentElement?.closest("[data-rows]")) : found;
  }

  function fill(root, data, top) {
    for (const n of nodes(root, "[data-f]", top)) {
      const key = n.dataset.f;
      if (has(data, key) && n.textContent !== str(data[key])) n.textContent = str(data[key]);
    }
    for (const n of nodes(root, "[data-a]", top)) {
      for (const pair of n.dataset.a.split(/\s+/)) {
        const [attr, key] = pair.split(":");
        if (!attr || !key || !has(data, key)) continue;
        const value = str(data[key]);
        if ((attr === "href" || attr === "action") && !localPath.test(value)) continue;
        if (n.getAttribute(attr) !== value) n.setAttribute(attr, value);
      }
    }
    for (const n of nodes(root, "[data-w]", top)) {
      if (has(data, n.dataset.w)) n.style.width = `${Number(data[n.dataset.w]) || 0}%`;
    }
    for (const n of nodes(root, "[data-show]", top)) {
      if (has(data, n.dataset.show)) n.hidden = !data[n.dataset.show];
    }
  }

  function rows(container, list) {
    const template = document.getElementById(container.dataset.template);
    if (!template) return;
    const existing = new Map();
    for (const row of Array.from(container.children)) existing.set(row.dataset.key, row);
    let previous = null;
    for (const item of list) {
      const key = str(item.key);
      let row = existing.get(key);
      if (row) {
        existing.delete(key);
      } else {
        row = template.content.firstElementChild.cloneNode(true);
        row.classList.add("fresh");
      }
      fill(row, item, false);
      const wanted = previous ? previous.nextElementSibling : container.firstElementChild;
      if (wanted !== row) container.insertBefore(row, wanted);
      previous = row;
    }
    for (const row of existing.values()) row.remove();
  }

  function chart(svg, bars) {
    const groups = svg.querySelectorAll("g");
    bars.forEach((bar, i) => {
      const group = groups[i];
      if (!group) return;
      group.querySelector("title").textContent = str(bar.title);
      const [done, failed] = group.querySelectorAll("rect");
      const set = (rect, y, h) => {
        rect.setAttribute("x", str(bar.x));
        rect.setAttribute("width", str(bar.w));
        rect.setAttribute("y", str(y));
        rect.setAttribute("height", str(h));
      };
      set(done, bar.y_done, bar.h_done);
      set(failed, bar.y_failed, bar.h_failed);
    });
  }

  function apply(data) {
    fill(body, data, true);
    for (const container of document.querySelectorAll("[data-rows]")) {
      const list = data[container.dataset.rows];
      if (Array.isArray(list)) rows(container, list);
    }
    for (const svg of document.querySelectorAll("[data-chart]")) {
      const bars = data[svg.dataset.chart];
      if (Array.isArray(bars)) chart(svg, bars);
    }
  }

  function setLive(status, label) {
    if (!live) return;
    live.dataset.status = status;
    live.textContent = label;
  }

  let busy = false;
  let again = false;
  async function refresh() {
    const url = body.dataset.poll;
    if (!url) return;
    if (busy) {
      again = true;
      return;
    }
    busy = true;
    try {
      const response = await fetch(url, {
        headers: { Accept: "application/json" },
        credentials: "same-origin",
        cache: "no-store",
      });
      if (!response.ok) throw new Error(`HTTP ${response.status}`);
      apply(await response.json());
      setLive("ok", "live");
    } catch (error) {
      setLive("down", "offline");
    } finally {
      busy = false;
      if (again) {
        again = false;
        refresh();
      }
    }
  }

  let toastTimer = null;
  function say(message, tone) {
    if (!toast) return;
    toast.textContent = message;
    toast.dataset.tone = tone;
    toast.hidden = false;
    clearTimeout(toastTimer);
    toastTimer = setTimeout(() => {
      toast.hidden = true;
    }, 3500);
  }

  document.addEventListener("submit", async (event) => {
    const form = event.target;
    if (!(form instanceof HTMLFormElement) || !form.classList.contains("act")) return;
    event.preventDefault();
    const button = form.querySelector("button");
    if (button) button.disabled = true;
    try {
      const response = await fetch(form.action, {
        method: "POST",
        headers: { "X-CSRF-Token": csrf, Accept: "application/json" },
        credentials: "same-origin",
      });
      const data = await response.json().catch(() => ({}));
      say(str(data.message || data.error || `HTTP ${response.status}`), response.ok ? "ok" : "bad");
    } catch (error) {
      say("the dashboard did not answer", "bad");
    } finally {
      if (button) button.disabled = false;
      await refresh();
    }
  });

  function loop() {
    refresh().finally(() => setTimeout(loop, document.hidden ? interval * 5 : interval));
  }
  if (body.dataset.poll) setTimeout(loop, interval);
})();
