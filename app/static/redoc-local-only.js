/* The API docs load nothing from outside this server. ReDoc 2.5 always draws its vendor's
   logo in the side menu from cdn.redoc.ly (no option turns it off). This script runs before
   ReDoc: an image whose address is on another web server gets an empty one instead, so
   nothing is requested, and ReDoc's own error handler leaves the logo out (the "API docs by
   Redocly" link stays). */
(function () {
  "use strict";
  var NOTHING = "data:,"; // not an image: it fails at once, without a request

  function elsewhere(value) {
    try {
      var url = new URL(String(value), document.baseURI);
      return /^https?:$/.test(url.protocol) && url.origin !== window.location.origin;
    } catch (e) {
      return false;
    }
  }

  function local(value) {
    return elsewhere(value) ? NOTHING : value;
  }

  var setAttribute = Element.prototype.setAttribute;
  Element.prototype.setAttribute = function (name, value) {
    if (this instanceof HTMLImageElement && String(name).toLowerCase() === "src") {
      value = local(value);
    }
    return setAttribute.call(this, name, value);
  };

  var src = Object.getOwnPropertyDescriptor(HTMLImageElement.prototype, "src");
  Object.defineProperty(HTMLImageElement.prototype, "src", {
    configurable: true,
    enumerable: src.enumerable,
    get: src.get,
    set: function (value) { src.set.call(this, local(value)); }
  });
})();
