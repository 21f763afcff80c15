/* Loaded before RequireJS and the ipywidgets embed manager on pages with widgets
   (see nb_ipywidgets_js in _config.yml). */

/* RequireJS looks modules up under baseUrl: _static/npm/, the copy of node_modules
   made by book/_ext/book_html.py. The modules bundled in embed-amd.js
   (@jupyter-widgets/base, controls, html-manager) find their fonts next to their
   own module URL, so map them into html-manager's dist/ folder, where the fonts are. */
var require = {
  baseUrl: new URL("npm/", document.currentScript.src).href,
  paths: {
    "@jupyter-widgets": "@jupyter-widgets/html-manager/dist",
    "@jupyter-widgets/html-manager/dist": "@jupyter-widgets/html-manager/dist",
    /* The book's controls (ddp_lab/widgets) are anywidgets: the embed manager asks
       RequireJS for the module "anywidget", whose AMD build is anywidget/dist/index.js
       (it defines AnyModel and AnyView on top of @jupyter-widgets/base, which
       embed-amd.js provides). Found here, it is never fetched from a CDN. */
    "anywidget": "anywidget/dist/index",
  },
};

/* @jupyter-widgets/controls typesets widget descriptions with the MathJax 2 API,
   MathJax.Hub.Queue(["Typeset", MathJax.Hub, element]); the book loads MathJax 3,
   which has no Hub, so every widget with a description would throw
   (jupyter-widgets/ipywidgets#3829). Map that one call onto MathJax 3. */
document.addEventListener("DOMContentLoaded", function () {
  var mathjax = window.MathJax;  // MathJax's deferred script has run by now
  if (!mathjax || mathjax.Hub || !mathjax.startup) return;
  mathjax.Hub = {
    Queue: function (command) {
      var element = command[2];
      mathjax.startup.promise.then(function () {
        return mathjax.typesetPromise([element]);
      });
    },
  };
});
