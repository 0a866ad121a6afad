/** Unix time in seconds: the unit of every timestamp column. */
export const nowSeconds = () => Math.floor(Date.now() / 1000);
