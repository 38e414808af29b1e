// A small, safe markdown renderer for answers: all text is HTML-escaped first, then fenced code blocks (with a
// copy button), inline code, headings, lists, quotes, bold/italic and http(s) links are turned into HTML.
"use strict";

(function () {
  function escapeHtml(text) {
    return text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;")
      .replace(/"/g, "&quot;").replace(/'/g, "&#39;");
  }

  // Inline markup on already-escaped text; code spans are cut out first so nothing inside them changes.
  function renderInline(escaped) {
    const codes = [];
    let text = escaped.replace(/`([^`\n]+)`/g, (_, code) => {
      codes.push(code);
      return "\u0000" + (codes.length - 1) + "\u0000";
    });
    text = text.replace(/\[([^\]\n]+)\]\((https?:\/\/[^\s)]+)\)/g,
      (_, label, url) => `<a href="${url}" target="_blank" rel="noopener noreferrer">${label}</a>`);
    text = text.replace(/\*\*([^*\n]+)\*\*/g, "<strong>$1</strong>");
    text = text.replace(/(^|[^*\w])\*([^*\n]+)\*(?=[^*\w]|$)/g, "$1<em>$2</em>");
    text = text.replace(/(^|[^_\w])_([^_\n]+)_(?=[^_\w]|$)/g, "$1<em>$2</em>");
    return text.replace(/\u0000(\d+)\u0000/g, (_, i) => `<code>${codes[Number(i)]}</code>`);
  }

  function codeBlock(lang, code) {
    const label = lang ? `<span class="code-lang">${escapeHtml(lang)}</span>` : "<span></span>";
    return `<div class="code-block"><div class="code-head">${label}` +
      `<button type="button" class="copy-code">Copy</button></div>` +
      `<pre><code>${escapeHtml(code)}</code></pre></div>`;
  }

  // Block structure of a text without code fences: paragraphs, headings, lists, quotes, rules.
  function renderBlocks(text) {
    const lines = text.split("\n");
    const out = [];
    let paragraph = [];
    let list = null;   // {tag, items}
    const flushParagraph = () => {
      if (paragraph.length) out.push(`<p>${paragraph.map(l => renderInline(escapeHtml(l))).join("<br>")}</p>`);
      paragraph = [];
    };
    const flushList = () => {
      if (!list) return;
      const items = list.items.map(i => `<li>${renderInline(escapeHtml(i))}</li>`).join("");
      out.push(`<${list.tag}>${items}</${list.tag}>`);
      list = null;
    };
    for (const line of lines) {
      let m;
      if (!line.trim()) { flushParagraph(); flushList(); continue; }
      if ((m = line.match(/^(#{1,6})\s+(.*)$/))) {
        flushParagraph(); flushList();
        const level = Math.min(m[1].length + 2, 6);   // h3..h6 inside a message
        out.push(`<h${level}>${renderInline(escapeHtml(m[2]))}</h${level}>`);
      } else if ((m = line.match(/^\s*[-*+]\s+(.*)$/)) || (m = line.match(/^\s*\d+[.)]\s+(.*)$/))) {
        flushParagraph();
        const tag = /^\s*\d/.test(line) ? "ol" : "ul";
        if (!list || list.tag !== tag) { flushList(); list = { tag, items: [] }; }
        list.items.push(m[1]);
      } else if ((m = line.match(/^>\s?(.*)$/))) {
        flushParagraph(); flushList();
        out.push(`<blockquote>${renderInline(escapeHtml(m[1]))}</blockquote>`);
      } else if (/^\s*([-*_])\s*\1\s*\1[\s\-*_]*$/.test(line)) {
        flushParagraph(); flushList();
        out.push("<hr>");
      } else {
        flushList();
        paragraph.push(line);
      }
    }
    flushParagraph(); flushList();
    return out.join("");
  }

  // Fenced code blocks first; an unterminated fence (still streaming) runs to the end.
  function renderMarkdown(text) {
    const parts = [];
    const fence = /^```([^\n`]*)\n([\s\S]*?)(?:^```[ \t]*$|(?![\s\S]))/gm;
    let last = 0;
    let m;
    while ((m = fence.exec(text)) !== null) {
      parts.push(renderBlocks(text.slice(last, m.index)));
      parts.push(codeBlock(m[1].trim(), m[2].replace(/\n$/, "")));
      last = fence.lastIndex;
      if (m[0].length === 0) break;
    }
    parts.push(renderBlocks(text.slice(last)));
    return parts.join("");
  }

  window.StrataMarkdown = { renderMarkdown, escapeHtml };
})();
