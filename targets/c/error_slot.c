int st_error_site = -1;
long long st_error_value;
int stitch_error_site(void) { return st_error_site; }
long long stitch_error_value(void) { return st_error_value; }
