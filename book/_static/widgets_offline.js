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

/* anywidget 0.11 gives each model 2 seconds to load its module and initialize:
   its Runtime starts AbortSignal.timeout(2e3) and then rejects the model's
   `ready` promise with "[anywidget] Failed to initialize model.". Only messages
   from a kernel await that promise; in the static book nothing does, so on a slow
   or busy machine the browser reports an unhandled rejection although the control
   appears moments later (the view renders when the module is ready, whenever that
   is). A module that really fails is reported separately, by the view. So this one
   rejection is handled here, and left as a warning in the console. */
window.addEventListener("unhandledrejection", function (event) {
  var reason = event.reason;
  if (reason && reason.message === "[anywidget] Failed to initialize model.") {
    event.preventDefault();
    console.warn("anywidget took over 2 s to initialize a control; it renders when ready");
  }
});
